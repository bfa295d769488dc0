"""`python -m metainfer_core.actions [docs/actions.md]`: rewrite the page's actions table from the
actions' declarations (metainfer_core/actions/catalogue.py)."""
import sys
from pathlib import Path

from metainfer_core.actions.catalogue import rewritten

path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/actions.md")
path.write_text(rewritten(path.read_text()))
print(f"wrote the actions table into {path}")
