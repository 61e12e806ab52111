"""The streaming tests reuse the serving tests' process harness (test/serving)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "serving"))
