# Ray placement groups, as shmenv.ray makes them (see ../__init__.pyi).
from typing import Any

from ray import ObjectRef

class PlacementGroup:
    def ready(self) -> ObjectRef: ...

def placement_group(bundles: list[dict[str, float]], strategy: str = "PACK", **kwargs: Any) -> PlacementGroup: ...
def remove_placement_group(placement_group: PlacementGroup) -> None: ...
