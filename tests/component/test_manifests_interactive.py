"""Component ``interactive``: an overlay with it builds, validates against the ScaledObject
schema, and hands the scaler's real parser the open-loop setting the README measured.

No API server runs here (kustomize builds offline; the CRD schema is the stored one).
"""

from __future__ import annotations

from pathlib import Path

from external_scaler.metadata import parse_metadata
from tests.component.test_manifests_build import _crd_errors, objects
from tests.component.test_manifests_contract import scaled_object
from tests.component.test_manifests_exposure import build_with_component


def test_interactive_component_sets_headroom_for_open_loop_traffic(tmp_path: Path) -> None:
    so, meta = scaled_object(build_with_component(tmp_path, "interactive"))
    assert not _crd_errors(so)
    spec = parse_metadata(meta).policy  # the scaler's real parser
    assert spec.target_saturation == 0.7
    assert spec.growth_horizon_s == 200.0
    # Everything else is the base's: windows, slots, the HPA behaviour.
    base_so, base_meta = scaled_object(objects("overlays/emulator"))
    changed = {k for k in meta if meta.get(k) != base_meta.get(k)}
    assert changed == {"targetSaturation", "growthHorizonSeconds"}
    assert so["spec"]["advanced"] == base_so["spec"]["advanced"]
