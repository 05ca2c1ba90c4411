"""``inflight.engines.vllm_cpu`` without vLLM: the model it builds, its install record and the
message when there is none, the replica's command and environment, the core locks, and
``inflight up --engine vllm-cpu``'s flags (the real engine runs in tests/real_engine)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from inflight.cli import build_parser
from inflight.config import ConfigError
from inflight.engines import vllm_cpu
from inflight.engines.vllm_cpu import (
    MODELS,
    EngineNotReady,
    ModelSpec,
    build_model,
    claim_core,
    load_install,
    serve_argv,
    serve_env,
    write_install,
)
from inflight.up.cli import UpSettings, settings_from_args

TINY = ModelSpec("tiny", hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                 vocab_size=300)  # fmt: skip
TEXT = ["def f(x):\n    return x + 1\n", "the quick brown fox jumps over the lazy dog\n"] * 50


def fake_install(home: Path, models: tuple[str, ...] = ("llama-150m",)) -> Path:
    """An engine.json naming a venv whose bin/vllm is an executable file (never run here)."""
    venv = home / "venv"
    (venv / "bin").mkdir(parents=True)
    vllm = venv / "bin" / "vllm"
    vllm.write_text("#!/bin/sh\nexit 0\n")
    vllm.chmod(0o755)
    write_install(home, venv, models)
    return home


def settings(*argv: str) -> UpSettings:
    return settings_from_args(build_parser().parse_args(["up", "--no-prometheus", *argv]))


# --- the model ------------------------------------------------------------------------------


def test_a_model_is_a_llama_config_a_trained_tokenizer_and_a_chat_template(tmp_path) -> None:
    model = tmp_path / "tiny"
    assert build_model(TINY, model, iter(TEXT)) is True
    config = json.loads((model / "config.json").read_text())
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"]) == (64, 2)
    assert config["head_dim"] == 16
    # Every id the random weights can produce decodes: the config's vocabulary is the
    # tokenizer's own.
    assert config["vocab_size"] == len(tokenizer["model"]["vocab"]) <= 300
    assert [t["content"] for t in tokenizer["added_tokens"]] == list(vllm_cpu.SPECIAL_TOKENS)
    assert config["bos_token_id"] == 0 and config["eos_token_id"] == 1
    tok_config = json.loads((model / "tokenizer_config.json").read_text())
    assert "add_generation_prompt" in tok_config["chat_template"]
    assert (tok_config["bos_token"], tok_config["eos_token"]) == ("<s>", "</s>")
    assert json.loads((model / "generation_config.json").read_text())["eos_token_id"] == 1


def test_a_built_model_is_not_rebuilt_until_its_spec_changes(tmp_path) -> None:
    model = tmp_path / "tiny"
    assert build_model(TINY, model, iter(TEXT)) is True
    assert build_model(TINY, model, iter(TEXT)) is False
    bigger = ModelSpec(**{**TINY.__dict__, "layers": 3})
    assert build_model(bigger, model, iter(TEXT)) is True
    assert json.loads((model / "config.json").read_text())["num_hidden_layers"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]  # no temporary directory left


def test_the_models_sizes() -> None:
    # What the README and the help say: ~143M and ~8M parameters.
    assert round(MODELS["llama-150m"].parameters / 1e6) == 143
    assert round(MODELS["llama-8m"].parameters / 1e6) == 8
    # 16 KiB of KV cache a token: 1 GiB holds 65,536 tokens (512 blocks of 128).
    assert MODELS["llama-150m"].kv_bytes_per_token == 16 * 1024


# --- the install record ---------------------------------------------------------------------


def test_no_install_names_the_command_that_makes_one(tmp_path) -> None:
    with pytest.raises(EngineNotReady, match=r"no engine\.json.*run `make vllm-cpu`"):
        load_install(tmp_path)
    home = fake_install(tmp_path / "home")
    (home / "venv" / "bin" / "vllm").unlink()
    with pytest.raises(EngineNotReady, match=r"bin/vllm is missing.*make vllm-cpu"):
        load_install(home)


def test_an_install_names_its_venv_and_models(tmp_path) -> None:
    home = fake_install(tmp_path / "home")
    install = load_install(home)
    assert install.vllm_bin == home / "venv" / "bin" / "vllm"
    assert install.model_dir("llama-150m") == home / "models" / "llama-150m"
    assert install.vllm_version == vllm_cpu.VLLM_VERSION
    with pytest.raises(EngineNotReady, match=r"no model 'nope'.*llama-150m"):
        install.model_dir("nope")


# --- a replica ------------------------------------------------------------------------------


def test_vllm_serve_runs_the_local_model_offline_with_the_slots_and_engine_args_last(
    tmp_path,
) -> None:
    install = load_install(fake_install(tmp_path / "home"))
    argv = serve_argv(install, "llama-150m", "m", 8123, 4, engine_args=["--max-model-len=2048"])
    assert argv[:3] == [str(install.vllm_bin), "serve", str(install.model_dir("llama-150m"))]
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--port"] == "8123" and pairs["--host"] == "127.0.0.1"
    assert pairs["--max-num-seqs"] == "4" and pairs["--served-model-name"] == "m"
    assert pairs["--load-format"] == "dummy" and pairs["--dtype"] == "bfloat16"
    assert "--enforce-eager" in argv
    assert argv[-1] == "--max-model-len=2048"  # instead of ours
    assert "--max-model-len" not in argv
    assert serve_argv(install, "llama-150m", "m", 8123, 4).count("--max-model-len") == 1


def test_the_engine_environment() -> None:
    base = {"PATH": "/bin", "PYTHONPATH": "/repo", "HF_HUB_OFFLINE": "0"}
    env = serve_env(base, [], core=1)
    assert "PYTHONPATH" not in env  # vLLM runs in its own venv
    assert env["HF_HUB_OFFLINE"] == "0"  # the caller's wins
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    # VLLM_CPU_KVCACHE_SPACE would override --kv-cache-memory-bytes: not set with it.
    sized = serve_env(base, ["--kv-cache-memory-bytes=2000000000"], core=None)
    assert "VLLM_CPU_KVCACHE_SPACE" not in sized
    assert "VLLM_CPU_OMP_THREADS_BIND" not in sized


def test_the_engine_writes_its_temp_files_in_the_replicas_own_dir(tmp_path) -> None:
    env = serve_env({"PATH": "/bin", "TMPDIR": "/scratch"}, [], None, tmp_dir=tmp_path / "r")
    assert env["TMPDIR"] == str(tmp_path / "r")  # its IPC sockets and file store follow
    assert "VLLM_RPC_BASE_PATH" not in env  # vLLM's default: the temp dir, so TMPDIR
    assert "TMPDIR" not in serve_env({}, [], None)
    assert vllm_cpu.tmp_dir(4321, tmp_path) == tmp_path / "inflight-vllm-4321"
    assert len(str(vllm_cpu.tmp_dir(4_194_304)) + "/" + "u" * 36) < 108  # a socket path


def test_sweeping_removes_the_dirs_of_replicas_gone_and_only_those(tmp_path) -> None:
    gone = vllm_cpu.tmp_dir(_unused_pid(), tmp_path)  # a PID no process has any more
    live = vllm_cpu.tmp_dir(os.getpid(), tmp_path)
    other = tmp_path / "inflight-vllm-notapid"
    for path in (gone, live, other):
        path.mkdir()
        (path / "0c1f-socket").write_text("")  # stands in for a socket file vLLM left
    assert vllm_cpu.sweep_tmp_dirs(tmp_path) == [gone]
    assert not gone.exists() and live.exists() and other.exists()
    assert vllm_cpu.sweep_tmp_dirs(tmp_path) == []


def _unused_pid() -> int:
    """A PID no process has: Linux gives PIDs below ``pid_max`` only (no child is started
    for one: the unit tier starts no process)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text())


def test_each_engine_claims_its_own_core_lowest_first(tmp_path) -> None:
    first = claim_core(tmp_path, cores=[1, 0])
    second = claim_core(tmp_path, cores=[1, 0])
    assert first is not None and second is not None
    assert (first[0], second[0]) == (0, 1)
    assert claim_core(tmp_path, cores=[0, 1]) is None  # every core held: unpinned
    os.close(first[1])  # the engine on core 0 exits
    again = claim_core(tmp_path, cores=[0, 1])
    assert again is not None and again[0] == 0
    for fd in (second[1], again[1]):
        os.close(fd)


# --- inflight up --engine ------------------------------------------------------------------


def test_the_emulator_stays_the_default_engine() -> None:
    config = settings()
    assert config.engine == "emulator"
    assert config.replica_command[config.replica_command.index("-m") + 1] == "inflight"
    assert "emulator" in config.replica_command
    assert config.replica_health_timeout_s == 0.5


def test_engine_vllm_cpu_without_make_vllm_cpu_says_to_run_it(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"--engine.*not set up.*run `make vllm-cpu`"):
        settings("--engine", "vllm-cpu", "--engine-home", str(tmp_path))


def test_engine_vllm_cpu_runs_the_launcher_with_the_slots_and_engine_args(tmp_path) -> None:
    home = fake_install(tmp_path / "home")
    config = settings(
        "--engine", "vllm-cpu", "--engine-home", str(home), "--slots-per-replica", "3",
        "--engine-arg=--num-gpu-blocks-override=40", "--engine-arg=--max-model-len=2048",
    )  # fmt: skip
    cmd = list(config.replica_command)
    assert cmd[cmd.index("-m") + 1 : cmd.index("-m") + 3] == ["inflight.engines.vllm_cpu", "serve"]
    assert cmd[cmd.index("--port") + 1] == "{port}"  # vllm serve cannot report its port
    assert cmd[cmd.index("--max-num-seqs") + 1] == "3"
    assert cmd[cmd.index("--home") + 1] == str(home.resolve())
    assert cmd[cmd.index("--served-model-name") + 1] == "llama-150m" == config.model_name
    assert cmd[cmd.index("--") + 1 :] == ["--num-gpu-blocks-override=40", "--max-model-len=2048"]
    assert config.replica_health_timeout_s == vllm_cpu.HEALTH_TIMEOUT_S
    assert config.replicas_about == "vllm-cpu, model llama-150m"


def test_engine_args_from_the_environment_are_a_json_array(tmp_path, monkeypatch) -> None:
    home = fake_install(tmp_path / "home")
    monkeypatch.setenv("INFLIGHT_UP_ENGINE_ARG", '["--max-model-len=2048", "--seed=1,2"]')
    config = settings("--engine", "vllm-cpu", "--engine-home", str(home))
    assert config.engine_arg == ["--max-model-len=2048", "--seed=1,2"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replica-cmd", "vllm serve m --port {port}"], r"--replica-cmd.*give one of them"),
        (["--startup-s", "5"], r"--startup-s.*the emulator's start-up"),
        (["--engine-model", "nope"], r"no model 'nope'"),
    ],
)
def test_engine_vllm_cpu_refuses_what_cannot_apply(tmp_path, argv, message) -> None:
    home = fake_install(tmp_path / "home")
    with pytest.raises(ConfigError, match=message):
        settings("--engine", "vllm-cpu", "--engine-home", str(home), *argv)


def test_engine_args_need_an_engine_of_inflights() -> None:
    # The emulator takes them too (tests/unit/test_up_capacity.py); a --replica-cmd does not.
    with pytest.raises(ConfigError, match=r"--engine-arg.*--replica-cmd"):
        settings("--engine-arg=--max-model-len=2048", "--replica-cmd", "x --port {port}")
