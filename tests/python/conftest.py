"""pytest set-up: the package from this checkout (python/) over the library built in build/
(or SSMOPS_LIBRARY)."""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
if "SSMOPS_LIBRARY" not in os.environ:
    for build in ("build", "build-asan"):
        lib = ROOT / build / "libssmops.so"
        if lib.is_file():
            os.environ["SSMOPS_LIBRARY"] = str(lib)
            break
