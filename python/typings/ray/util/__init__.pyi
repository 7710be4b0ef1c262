# ray.util's names that shmenv uses (see ../__init__.pyi).
from ray.util import placement_group as placement_group
from ray.util import scheduling_strategies as scheduling_strategies

def get_node_ip_address() -> str: ...
