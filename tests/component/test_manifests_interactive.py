"""Component ``interactive``: an overlay with it builds, validates against the ScaledObject
schema, and hands the scaler's real parser the open-loop setting the README measured.

No API server runs here (kustomize builds offline; the CRD schema is the stored one).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from external_scaler.metadata import parse_metadata
from tests.component.test_manifests_build import MANIFESTS, _crd_errors, kubectl, objects
from tests.component.test_manifests_contract import Obj, scaled_object


def _build(tmp_path: Path) -> list[Obj]:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(MANIFESTS, overlay)  # kustomize refuses absolute paths
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{rel}/overlays/emulator"],
                "components": [f"{rel}/components/interactive"],
            }
        )
    )
    proc = subprocess.run(
        [kubectl(), "kustomize", str(overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def test_interactive_component_sets_headroom_for_open_loop_traffic(tmp_path: Path) -> None:
    so, meta = scaled_object(_build(tmp_path))
    assert not _crd_errors(so)
    spec = parse_metadata(meta).policy  # the scaler's real parser
    assert spec.target_saturation == 0.7
    assert spec.growth_horizon_s == 200.0
    # Everything else is the base's: windows, slots, the HPA behaviour.
    base_so, base_meta = scaled_object(objects("overlays/emulator"))
    changed = {k for k in meta if meta.get(k) != base_meta.get(k)}
    assert changed == {"targetSaturation", "growthHorizonSeconds"}
    assert so["spec"]["advanced"] == base_so["spec"]["advanced"]
