import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # gantry_client without installing it
sys.path.insert(0, str(HERE))  # contract.py
