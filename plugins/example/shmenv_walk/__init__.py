"""WalkC-v0 as a native shmenv env: the entry point shmenv calls for the library's path."""

from pathlib import Path


def plugin(env_id: str) -> dict:
    """What shmenv needs to run ``env_id``: the library the workers load (built by setup.py
    next to this file) and, optionally, the config each env gets by default."""
    (library,) = Path(__file__).parent.glob("_walk*.so")
    return {"library": str(library), "config": {}}
