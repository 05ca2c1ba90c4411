"""The image, built and run as users deploy it: ``make image``, then emulator, router and
scaler containers, each configured only through ``INFLIGHT_*`` environment variables.

Real parts only: podman (runc, on the host network) runs the image that scripts/image.sh
builds from the Dockerfile (on a stand-in base from Debian packages where no registry can be
reached); the OpenAI SDK sends a streamed completion through the router container to the
emulator container; a KEDA-shaped client calls the scaler container (direct source, reading
the router) over gRPC while that stream is open, and sees L = 1.

Ports: each server binds port 0 on 127.0.0.1 and writes its ready file into a directory
bind-mounted from tmp_path (``INFLIGHT_<X>_READY_FILE``), so no port is picked in advance.

Where containers cannot run (no podman, a build or a container that fails), the test fails
and says so: the image is part of what this project ships.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import grpc
import openai
import pytest

from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from inflight import ready
from tests.support import wait_for

REPO = Path(__file__).resolve().parents[2]
IMAGE_SCRIPT = REPO / "scripts" / "image.sh"
CONTAINERS_CONF = REPO / "scripts" / "containers.conf"
UID = 10001  # the Dockerfile's USER and the manifests' runAsUser
BUDGET_MB = 150.0  # what the image may add over its base
MODEL = "image-test-model"
READY_DIR = "/ready"  # where the bind-mounted directory appears in each container
# time-scale 0.1: the value holds a scale-down of L for 6 s (60 seed s), not 60
# The floor off: L's fall back to 0 is the check (its 900 s memory would hold 0.6 x the peak).
META = {"timeScale": "0.1", "slotsPerReplica": "4", "floorWindowSeconds": "0"}
CANNOT = "containers cannot run on this machine"


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(Path(env.get("CONTAINERS_CONF", CONTAINERS_CONF)).resolve())
    return env


def podman(*args: str, timeout_s: float = 120.0) -> str:
    """Run podman; AssertionError with its stderr when it fails."""
    done = subprocess.run(
        ["podman", *args],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"podman {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    return done.stdout


class Containers:
    """The containers one test starts (named with a random suffix); all removed at the end."""

    def __init__(self, image: str, ready_dir: Path) -> None:
        self.image = image
        self.ready_dir = ready_dir
        self.suffix = uuid.uuid4().hex[:8]
        self.started: list[str] = []

    def run(self, subcommand: str, env: Mapping[str, str]) -> tuple[str, dict[str, int]]:
        """Start ``inflight <subcommand>`` with nothing but ``env`` as its configuration;
        return its name and the ports its ready file reports."""
        name = f"inflight-test-{subcommand}-{self.suffix}"
        ready_file = self.ready_dir / f"{subcommand}.json"
        prefix = f"INFLIGHT_{subcommand.upper()}_"
        env = {**env, prefix + "READY_FILE": f"{READY_DIR}/{ready_file.name}"}
        flags = [f"--env={key}={value}" for key, value in env.items()]
        self.started.append(name)
        try:
            podman(
                "run", "--detach", "--name", name, "--network", "host",
                "--volume", f"{self.ready_dir}:{READY_DIR}", *flags, self.image, subcommand,
            )  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(f"{CANNOT}: {exc}") from None

        def reported() -> ready.ReadyReport | None:
            state = podman("inspect", "--format", "{{.State.Status}}", name).strip()
            assert state == "running", f"{name} is {state}:\n{self.logs(name)}"
            return ready.read(ready_file)

        report = wait_for(reported, timeout_s=60, what=f"{name}'s ready file ({prefix}READY_FILE)")
        return name, dict(report.ports)

    def logs(self, name: str) -> str:
        done = subprocess.run(
            ["podman", "logs", name], env=podman_env(), capture_output=True, text=True, check=False
        )
        return (done.stdout + done.stderr)[-4000:]

    def uid(self, name: str) -> int:
        """The real uid of the container's main process, read from the host's /proc."""
        pid = int(podman("inspect", "--format", "{{.State.Pid}}", name))
        status = Path(f"/proc/{pid}/status").read_text()
        line = next(ln for ln in status.splitlines() if ln.startswith("Uid:"))
        return int(line.split()[1])

    def remove_all(self) -> list[str]:
        """Remove every container started (by name); the names that could not be removed."""
        left = []
        for name in self.started:
            done = subprocess.run(
                ["podman", "rm", "--force", "--time", "5", name],
                env=podman_env(),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if done.returncode != 0 and "no such container" not in done.stderr.lower():
                left.append(f"{name}: {done.stderr.strip()}")
        return left


@pytest.fixture(scope="module")
def image() -> str:
    """``make image``'s script; the image's name."""
    if shutil.which("podman") is None:
        pytest.fail(
            f"{CANNOT}: podman is not installed (scripts/setup.sh installs podman, runc and "
            "mmdebstrap as root; or: apt-get install -y --no-install-recommends podman runc "
            "mmdebstrap)"
        )
    done = subprocess.run(
        [str(IMAGE_SCRIPT)],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"{CANNOT}: scripts/image.sh failed (exit {done.returncode}):\n"
                    f"{done.stderr[-6000:]}")  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def containers(image: str, tmp_path: Path) -> Iterator[Containers]:
    ready_dir = tmp_path / "ready"
    ready_dir.mkdir()
    os.chown(ready_dir, UID, UID)  # the servers run as uid 10001 and write their files here
    started = Containers(image, ready_dir)
    try:
        yield started
    finally:
        left = started.remove_all()
        assert not left, f"containers left running: {left}"


def image_size(ref: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", ref))


def base_of() -> str:
    # The runtime stage's FROM: the image's lowest layers are exactly the base's.
    froms = [ln.split()[1] for ln in (REPO / "Dockerfile").read_text().splitlines()
             if ln.upper().startswith("FROM ")]  # fmt: skip
    return froms[-1]


def test_image_adds_at_most_the_budget_over_its_base(
    image: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = base_of()
    added_mb = (image_size(image) - image_size(base)) / 1e6
    layers = json.loads(podman("image", "inspect", "--format", "{{json .RootFS.Layers}}", image))
    base_layers = json.loads(
        podman("image", "inspect", "--format", "{{json .RootFS.Layers}}", base)
    )
    assert layers[: len(base_layers)] == base_layers, f"{image} is not built on {base}"
    with capsys.disabled():
        print(f"\nimage {image}: {added_mb:.1f} MB over its base {base} (budget {BUDGET_MB} MB)")
    assert added_mb <= BUDGET_MB, f"{image} adds {added_mb:.1f} MB over {base}"


def test_router_scaler_and_emulator_containers_configured_from_the_environment(
    containers: Containers,
) -> None:
    emulator, emulator_ports = containers.run(
        "emulator",
        {
            "INFLIGHT_EMULATOR_PORT": "0",
            "INFLIGHT_EMULATOR_SERVED_MODEL_NAME": MODEL,
            "INFLIGHT_EMULATOR_STARTUP_S": "0",
            "INFLIGHT_EMULATOR_MAX_NUM_SEQS": "4",
        },
    )
    emulator_url = f"http://127.0.0.1:{emulator_ports['http']}"
    router, router_ports = containers.run(
        "router",
        {
            "INFLIGHT_ROUTER_PORT": "0",
            "INFLIGHT_ROUTER_ENDPOINTS": emulator_url,
            "INFLIGHT_ROUTER_SLOTS_PER_ENDPOINT": "4",
        },
    )
    router_url = f"http://127.0.0.1:{router_ports['http']}"
    scaler, scaler_ports = containers.run(
        "scaler",
        {
            "INFLIGHT_SCALER_GRPC_PORT": "0",
            "INFLIGHT_SCALER_METRICS_PORT": "0",
            "INFLIGHT_SCALER_SOURCE": "direct",
            "INFLIGHT_SCALER_ROUTER_URL": router_url,
            "INFLIGHT_SCALER_POLL_INTERVAL_S": "0.2",
        },
    )
    for name in (emulator, router, scaler):
        assert containers.uid(name) == UID, name

    client = openai.OpenAI(base_url=router_url + "/v1", api_key="unused", max_retries=0)
    wait_for(lambda: _ready(client), timeout_s=60, what="the router to list the emulator's model")
    done = client.completions.create(model=MODEL, prompt="summarize the meeting", max_tokens=8)
    assert done.usage is not None and done.usage.completion_tokens == 8
    assert done.choices[0].text

    with grpc.insecure_channel(f"127.0.0.1:{scaler_ports['grpc']}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        wait_for(lambda: keda_value(stub) == 0.0, timeout_s=60, what="the idle scaler to answer 0")
        # One long stream held open through the router: L = 1, read by the scaler from it.
        stream = client.completions.create(
            model=MODEL, prompt="summarize the meeting", max_tokens=4000, stream=True
        )
        try:
            next(iter(stream))
            wait_for(lambda: keda_value(stub) == 1.0, timeout_s=60, what="the scaler to see L=1")
        finally:
            stream.close()
        # ... and its fall once the stream is closed, after the 6 s scale-down window.
        wait_for(lambda: keda_value(stub) == 0.0, timeout_s=60, what="L to fall back to 0")


def _ready(client: openai.OpenAI) -> bool:
    try:
        return [m.id for m in client.models.list().data] == [MODEL]
    except openai.APIError:
        return False


def keda_value(stub: pb_grpc.ExternalScalerStub) -> float | None:
    """The metric value KEDA would read (GetMetricSpec, then GetMetrics); None while the
    scaler answers UNAVAILABLE (no sample of the router yet)."""
    ref = pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=META)
    try:
        spec = stub.GetMetricSpec(ref, timeout=5).metricSpecs[0]
        assert spec.targetSizeFloat == 4.0
        request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricName)
        values = stub.GetMetrics(request, timeout=5).metricValues
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return None
        raise
    assert [v.metricName for v in values] == [spec.metricName]
    return values[0].metricValueFloat
