"""Small builders shared by both dashboards: the datasource variable, label variables and
Prometheus-backed panels, all bound to ``${datasource}`` (never a hard-coded uid).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import statetimeline as timeline_b
from grafana_foundation_sdk.builders import timeseries as ts_b
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m

from inflight import names as n

DATASOURCE_VAR: Final = "datasource"
DATASOURCE: Final = dash_m.DataSourceRef(type_val="prometheus", uid="${" + DATASOURCE_VAR + "}")
ALL_VALUE: Final = ".*"  # "All" matches a label that is absent too (local Prometheus)


@dataclass(frozen=True)
class Query:
    """One PromQL target: ``legend`` is Grafana's legend format."""

    expr: str
    legend: str


def datasource_variable() -> dash_b.DatasourceVariable:
    return dash_b.DatasourceVariable(DATASOURCE_VAR).label("Prometheus").type("prometheus")


def label_variable(name: str, metric: str, label: str, description: str) -> dash_b.QueryVariable:
    """A multi-select of ``label``'s values on ``metric``; "All" is the regex ``.*``."""
    return (
        dash_b.QueryVariable(name)
        .label(name)
        .description(description)
        .datasource(DATASOURCE)
        .query(f"label_values({metric}, {label})")
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
        .include_all(True)
        .all_value(ALL_VALUE)
        .multi(True)
        .current(dash_m.VariableOption(selected=True, text="All", value="$__all"))
    )


#: The vLLM replicas' job (a ScaledObject trigger's ``capacitySelector``), listed from
#: vLLM's KV series: the dashboards that read vLLM's own series select on it.
VLLM_JOB_VARIABLE: Final = "vllm_job"
#: Label matchers for vLLM's series: the namespace variable and the vLLM job variable.
VLLM_SELECTOR: Final = f'namespace=~"$namespace",job=~"${VLLM_JOB_VARIABLE}"'


def vllm_job_variable(description: str) -> dash_b.QueryVariable:
    """The :data:`VLLM_JOB_VARIABLE` multi-select (``description``: what it selects here)."""
    return label_variable(VLLM_JOB_VARIABLE, n.VLLM_KV_CACHE_USAGE, "job", description)


def dashboard(
    uid: str,
    title: str,
    description: str,
    tags: list[str],
    variable_metric: str,
    variables: Mapping[str, str],
) -> dash_b.Dashboard:
    """A dashboard with the settings both share (10 s refresh, last 30 m, editable), the
    datasource variable and one label variable per ``variables`` entry (label name →
    description), each listing that label's values on ``variable_metric``."""
    board = (
        dash_b.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(tags)
        .editable()
        .refresh("10s")
        .time("now-30m", "now")
        .timezone("browser")
        .with_variable(datasource_variable())
    )
    for label, label_description in variables.items():
        board = board.with_variable(
            label_variable(label, variable_metric, label, label_description)
        )
    return board


def selector(*variables: str) -> str:
    """Label matchers for the dashboard variables: ``namespace=~"$namespace",…``."""
    return ",".join(f'{v}=~"${v}"' for v in variables)


def _targets(queries: list[Query]) -> list[prom_b.Dataquery]:
    return [
        prom_b.Dataquery()
        .expr(q.expr)
        .legend_format(q.legend)
        .ref_id(chr(ord("A") + i))
        .datasource(DATASOURCE)
        for i, q in enumerate(queries)
    ]


def timeseries(
    panel_id: int,
    title: str,
    description: str,
    queries: list[Query],
    *,
    unit: str = "short",
    width: int = 12,
    right_axis: dict[str, str] | None = None,
    threshold: float | None = None,
    min_val: float | None = 0,
) -> ts_b.Panel:
    """A time series panel; ``right_axis`` maps a query's refId to its unit on the right.

    ``threshold`` draws a red line (e.g. saturation 1.0).
    """
    panel = (
        ts_b.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(list(_targets(queries)))
        .unit(unit)
        .height(8)
        .span(width)
        .line_width(2)
        .fill_opacity(10)
        .legend(
            common_b.VizLegendOptions()
            .show_legend(True)
            .display_mode(common_m.LegendDisplayMode.TABLE)
            .placement(common_m.LegendPlacement.BOTTOM)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(common_b.VizTooltipOptions().mode(common_m.TooltipDisplayMode.MULTI))
    )
    if min_val is not None:
        panel = panel.min(min_val)
    for ref_id, axis_unit in (right_axis or {}).items():
        panel = panel.override_by_query(
            ref_id,
            [
                dash_m.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                dash_m.DynamicConfigValue(id_val="unit", value=axis_unit),
            ],
        )
    if threshold is not None:
        panel = panel.thresholds(
            dash_b.ThresholdsConfig()
            .mode(dash_m.ThresholdsMode.ABSOLUTE)
            .steps(
                [
                    dash_m.Threshold(value=None, color="green"),
                    dash_m.Threshold(value=threshold, color="red"),
                ]
            )
        ).thresholds_style(
            common_b.GraphThresholdsStyleConfig().mode(common_m.GraphThresholdsStyleMode.LINE)
        )
    return panel


def stat(
    panel_id: int,
    title: str,
    description: str,
    query: Query,
    *,
    red_from: float = 1.0,
    width: int = 6,
    height: int = 4,
) -> stat_b.Panel:
    """One number, the query's last value: green below ``red_from``, red from it on."""
    return (
        stat_b.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(list(_targets([query])))
        .height(height)
        .span(width)
        .unit("short")
        .decimals(0)
        .color_mode(common_m.BigValueColorMode.BACKGROUND)
        .graph_mode(common_m.BigValueGraphMode.NONE)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(
            dash_b.ThresholdsConfig()
            .mode(dash_m.ThresholdsMode.ABSOLUTE)
            .steps(
                [
                    dash_m.Threshold(value=None, color="green"),
                    dash_m.Threshold(value=red_from, color="red"),
                ]
            )
        )
    )


#: ``state_timeline``'s default states: the scaler's active flag.
ACTIVE_STATES: Final = {0: ("idle", "blue"), 1: ("active", "green")}


def state_timeline(
    panel_id: int,
    title: str,
    description: str,
    queries: list[Query],
    *,
    width: int = 12,
    states: Mapping[int, tuple[str, str]] = ACTIVE_STATES,
) -> timeline_b.Panel:
    """On/off over time: ``states`` maps each value to (text, colour); by default the
    scaler's active flag, 0 = idle, 1 = active."""
    return (
        timeline_b.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(list(_targets(queries)))
        .height(8)
        .span(width)
        .mappings(
            [
                dash_m.ValueMap(
                    options={
                        str(value): dash_m.ValueMappingResult(text=text, color=color)
                        for value, (text, color) in states.items()
                    }
                )
            ]
        )
    )
