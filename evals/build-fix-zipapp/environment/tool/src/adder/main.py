import sys

from adder.core import add


def run():
    print(add(float(arg) for arg in sys.argv[1:]))
