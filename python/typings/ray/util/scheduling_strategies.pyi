# Ray's scheduling strategies, as shmenv.ray places its actors with them (see ../__init__.pyi).
from ray.util.placement_group import PlacementGroup

class PlacementGroupSchedulingStrategy:
    def __init__(
        self,
        placement_group: PlacementGroup,
        placement_group_bundle_index: int = -1,
        placement_group_capture_child_tasks: bool | None = None,
    ) -> None: ...

class NodeAffinitySchedulingStrategy:
    def __init__(self, node_id: str, soft: bool, **kwargs: object) -> None: ...
