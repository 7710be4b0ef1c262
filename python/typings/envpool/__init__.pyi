# Type stubs for the part of EnvPool (the `envpool` package) that shmenv.bench compares with.
# EnvPool is optional and the type check runs without it: with no stubs, `import envpool`
# would resolve to shmenv's own `envpool` module. EnvPool's envs are untyped (Any).
from typing import Any

__version__: str

def list_all_envs() -> list[str]: ...
def make(task_id: str, env_type: str = "gym", **kwargs: Any) -> Any: ...
