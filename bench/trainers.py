"""Trainers on what is published: TRL's SFTTrainer and DPOTrainer, through the card's snippets.

    .venv/bin/python bench/trainers.py [--steps 3] [--venv DIR] [--keep DIR]

Outside CI: it installs torch (CPU), transformers and trl into a venv of its own (default
`~/.cache/skillsft/bench-trainers-venv`, made with access to this project's packages), then,
inside that venv:

1. runs `skillsft run alfworld --teacher offline --preferences` on the bundled sample and
   `skillsft publish --dry-run --repo-id bench/skillsft-alfworld`, which writes the local Hub
   mirror `WORK_DIR/hub/` (the files an upload would commit, README.md card included);
2. builds a tiny student with no download: a byte-level BPE tokenizer trained on the corpus,
   with a small chat template, and a randomly initialised 2-layer Llama from a config, saved
   to a folder;
3. takes every ```python block of the card's Usage section that builds a trainer, swaps the
   repo id for the mirror's folder and `"<student model>"` for the student's folder, adds what
   a CPU run of a few steps needs to its `SFTConfig(...)`/`DPOConfig(...)` (`use_cpu=True,
   bf16=False, max_steps=--steps, logging_steps=1, report_to=[]`), runs it and prints the
   config it read and the first losses.

The losses only need to be finite: the point is that the published configs load and train as
the card says, not what the student learns. Keep it tiny: the machine is shared.
"""

import argparse
import json
import math
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ["torch==2.13.0", "transformers", "trl"]
REPO_ID = "bench/skillsft-alfworld"  # the dry run's repo id, which the card's snippets name
PLACEHOLDER_STUDENT = '"<student model>"'
# Enough for the chat roles the configs use; the trainers need the generation prompt marker.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
    "<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def in_bench_venv(venv: Path) -> bool:
    return Path(sys.prefix).resolve() == venv.resolve()


def ensure_venv(venv: Path) -> Path:
    """The venv, made once: this project's venv visible through a .pth file (its own .pth
    files, the editable install's among them, processed), the trainers installed in it."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        child = subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip()
        parents = "; ".join(f"site.addsitedir({path!r})" for path in site.getsitepackages())
        (Path(child) / "skillsft-project.pth").write_text(f"import site; {parents}\n")
    probe = subprocess.run([str(python), "-c", "import torch, transformers, trl"],
                           capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PACKAGES], check=True)
    return python


def skillsft(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "skillsft", *args], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)


def usage_snippets(card: str) -> list[str]:
    """The Usage section's python blocks that build a trainer."""
    usage = card.split("<!-- skillsft:usage:start -->", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", usage, re.DOTALL)
    return [block for block in blocks if "Trainer(" in block]


def corpus_texts(work: Path) -> list[str]:
    records = json.loads((work / "alfworld_sft_data.json").read_text())
    return [text for r in records for text in (r["instruction"], r["output"])]


def build_student(work: Path, folder: Path, max_length: int) -> None:
    """A tokenizer trained on the corpus and a random tiny Llama, saved like any checkpoint."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|pad|>", "<|bos|>", "<|eos|>", "<|end|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus_texts(work), trainers.BpeTrainer(
        vocab_size=1024, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<|pad|>",
                                   bos_token="<|bos|>", eos_token="<|end|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=max_length, pad_token_id=fast.pad_token_id,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)


def run_snippet(snippet: str, mirror: Path, student: Path, steps: int) -> dict[str, object]:
    """The card's snippet with the mirror and the student swapped in, and its trainer config
    told what a CPU run of a few steps needs (no bf16, `--steps` steps, a loss every step)."""
    code = snippet.replace(f'"{REPO_ID}"', repr(str(mirror))).replace(
        PLACEHOLDER_STUDENT, repr(str(student)))
    code = re.sub(r"\b(SFTConfig|DPOConfig)\(",
                  rf"\1(use_cpu=True, bf16=False, max_steps={steps}, logging_steps=1, "
                  "report_to=[], ", code)
    scope: dict[str, object] = {}
    exec(code.replace("trainer.train()", ""), scope)  # noqa: S102 - the card's own code
    trainer = scope["trainer"]
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    config = re.search(r'load_dataset\([^,]+, "([^"]+)"', code)
    return {"trainer": type(trainer).__name__, "config": config.group(1) if config else "?",
            "rows": len(trainer.train_dataset), "losses": losses,
            "finite": bool(losses) and all(math.isfinite(x) for x in losses)}


def bench(steps: int, keep: Path | None) -> int:
    base = Path(tempfile.mkdtemp(prefix="skillsft-trainers-"))
    try:
        work = base / "work"
        skillsft("run", "alfworld", "--teacher", "offline", "--preferences", "--work-dir",
                 str(work))
        skillsft("publish", "--work-dir", str(work), "--dry-run", "--repo-id", REPO_ID)
        mirror = work / "hub"
        card = (mirror / "README.md").read_text()
        max_length = int(re.search(r"max_length=(\d+)", card).group(1))
        student = base / "student"
        build_student(work, student, max_length)
        os.chdir(base)  # the trainers' default output_dir lands here
        results = [run_snippet(s, mirror, student, steps) for s in usage_snippets(card)]
        for result in results:
            print(json.dumps(result))
        if keep:
            shutil.copytree(mirror, keep, dirs_exist_ok=True)
        return 0 if results and all(r["finite"] for r in results) else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--venv", type=Path,
                        default=Path.home() / ".cache" / "skillsft" / "bench-trainers-venv")
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy the local Hub mirror the trainers read to this folder")
    args = parser.parse_args()
    if not in_bench_venv(args.venv):
        python = ensure_venv(args.venv)
        return subprocess.run([str(python), __file__, *sys.argv[1:]]).returncode
    return bench(args.steps, args.keep)


if __name__ == "__main__":
    sys.exit(main())
