"""metainfer: agentic engine generation for one model, weight format and GPU.

See DESIGN.md (in the shared folder beside the checkout) and README.md.
"""

from pathlib import Path

__version__ = "0.1.0"

#: Repository root (the folder holding ``templates/``, ``prompts/``, ``harness/``).
REPO_ROOT = Path(__file__).resolve().parents[1]
