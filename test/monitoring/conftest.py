import os
import sys

# synthetic.py and the child node script sit next to the tests
sys.path.insert(0, os.path.dirname(__file__))
