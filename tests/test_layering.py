"""The layering contract (pyproject.toml [tool.importlinter], docs/architecture.md) holds: higher layers import
lower ones only, and no package has an import cycle."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_layering_contract_is_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    r = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout
