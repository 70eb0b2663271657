import sys
from pathlib import Path

# exercise_harness.py and the other test helpers are imported by name.
sys.path.insert(0, str(Path(__file__).parent))
