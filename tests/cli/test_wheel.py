"""The package as users install it: a wheel in a fresh venv, run from a folder outside the repo.

Only skillsft itself comes from the wheel; its dependencies are borrowed from the test
environment through a .pth file (installing pyarrow, datasets etc. again would add minutes and
test pip, not us). The folder the commands run in holds modules named `tasks`, `pipeline` and
`schemas`, as a user's project may: skillsft must not import them.
"""

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_command_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    # Built from a copy of the committed files: a build in the working tree would leave build/
    # behind, and a stale build/ can smuggle deleted modules into later wheels.
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, check=True,
                             capture_output=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (REPO_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                    str(source)], check=True, capture_output=True, timeout=600)
    wheel = next(wheels.glob("skillsft-*.whl"))

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=600)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    project = tmp_path / "user-project"
    project.mkdir()
    for name in ("tasks", "pipeline", "schemas"):
        (project / f"{name}.py").write_text("raise ImportError('the user module was imported')\n")

    where = subprocess.run([str(python), "-c", "import skillsft.pipeline.envs as m; "
                            "print(m.__file__)"], cwd=project, check=True, capture_output=True,
                           text=True).stdout
    assert where.startswith(str(site)), where  # the wheel's copy, not the repo's

    done = subprocess.run([str(env_dir / "bin" / "skillsft"), "run", "alfworld"], cwd=project,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (project / "runs" / "alfworld" / "alfworld_sft_data.json").stat().st_size > 1000

    as_module = subprocess.run([str(python), "-m", "skillsft", "run", "webshop"], cwd=project,
                               capture_output=True, text=True, timeout=600)
    assert as_module.returncode == 0, as_module.stderr[-2000:]
    assert (project / "runs" / "webshop" / "webshop_sft_data.json").is_file()
