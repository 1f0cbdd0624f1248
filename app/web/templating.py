"""The jinja2 environment of the HTML pages and the filters that format values for people."""

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from app import ROOT
from app.db.schema import utc
from app.llm.reasoning import reasoning_field, split_thinking
from app.stats import FEW_TASKS
from app.web.charts import (
    best_success_chart,
    candidate_chart,
    harness_success_chart,
    loss_chart,
    pareto_chart,
    runs_test_chart,
    step_curves_chart,
)

templates = Jinja2Templates(directory=ROOT / "templates")
DASH = "\u2014"  # what a missing value looks like


def when(value: datetime | None) -> str:
    if value is None:
        return DASH
    return utc(value).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def when_short(value: datetime | None) -> str:
    """Month, day and time: enough for the lines of a run's event log."""
    return DASH if value is None else utc(value).strftime("%m-%d %H:%M:%S")


def duration(total_s: float) -> str:
    hours, rest = divmod(int(total_s), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def budget_value(name: str, value: float | None) -> str:
    """A budget's amount in its unit: counts, dollars or a duration."""
    if value is None:
        return DASH
    if name == "proposer_usd":
        return f"${value:,.2f}"
    return duration(value) if name == "wall_s" else f"{int(value):,}"


def score(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def count(value: int | float | None) -> str:
    if value is None:
        return DASH
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def seconds(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f} s"


def millis(value: float | None) -> str:
    return DASH if value is None else f"{value:,.0f} ms"


def size(value: int | None) -> str:
    """Bytes in binary units: checkpoint folders run from megabytes to gigabytes."""
    if value is None:
        return DASH
    if value < 1024:
        return f"{value} B"
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:,.1f} {unit}"


def percent(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:.0f}%"


def elapsed(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return DASH
    return duration((end - start).total_seconds())


def ago(value: datetime | None) -> str:
    """How long ago, for a live page (it is rendered again every 2 s): "12 s ago"."""
    if value is None:
        return DASH
    total = max((datetime.now(UTC) - utc(value)).total_seconds(), 0)
    if total < 120:
        return f"{total:.0f} s ago"
    return f"{total / 60:.0f} min ago" if total < 7200 else f"{total / 3600:.1f} h ago"


def short(text: Any, limit: int = 80) -> str:
    if text is None:
        return DASH
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def pretty(value: Any) -> str:
    """JSON for people: indented, non-ASCII left readable."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def text_of(content: Any) -> str:
    """A chat message's content: plain text, or the text parts of a multi-part content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "\n".join(str(p.get("text", pretty(p))) for p in content)
    return pretty(content)


def generation(value: dict | None) -> str:
    """An evaluation's generation settings in one line: backend, defaults, forced fields and
    the per-call cap (its full record is the cell's tooltip)."""
    if not value:
        return DASH  # evaluated before the settings were recorded
    parts = [value.get("backend", "?")]
    parts += [f"{k}={v}" for k, v in (value.get("defaults") or {}).items()]
    parts += [f"{k}={v} (forced)" for k, v in (value.get("forced") or {}).items()]
    parts.append(f"≤{value.get('max_tokens_per_call', DASH)} tokens/call")
    return ", ".join(parts)


def thinking(message: Any) -> tuple[str | None, Any]:
    """(reasoning, the rest) of a chat message: a multi-part content is left whole."""
    if not isinstance(message, dict):
        return None, message
    if not isinstance(message.get("content"), str | None):
        return reasoning_field(message), message.get("content")
    return split_thinking(message)


def with_query(path: str, params: dict[str, Any], **changes: Any) -> str:
    """`path` with the query `params` updated by `changes`; None drops a parameter.

    Keeps the rollout list's filters in the URL when one of them (or the page) changes.
    """
    merged = {k: v for k, v in {**params, **changes}.items() if v is not None}
    return f"{path}?{urlencode(merged)}" if merged else path


def counted(n: int | None, noun: str) -> str:
    """`n` as `count` writes it with its noun (given singular), plural unless n is 1:
    "1 candidate", "2 candidates", "1,204 rollouts"."""
    return f"{count(n)} {noun}{'' if n == 1 else 's'}"


_FORMATTER = HtmlFormatter(linenos="table", lineanchors="L", anchorlinenos=True)


def python_html(code: str) -> Markup:
    """Harness code highlighted server-side (styles in static/pygments.css)."""
    return Markup(highlight(code, PythonLexer(), _FORMATTER))


templates.env.filters.update(
    when=when,
    score=score,
    count=count,
    seconds=seconds,
    millis=millis,
    percent=percent,
    short=short,
    pretty=pretty,
    text_of=text_of,
    python_html=python_html,
    size=size,
    when_short=when_short,
    ago=ago,
    generation=generation,
    thinking=thinking,
    counted=counted,
)
templates.env.globals.update(
    elapsed=elapsed,
    with_query=with_query,
    DASH=DASH,
    budget_value=budget_value,
    FEW_TASKS=FEW_TASKS,
)
# the training and search charts, drawn as inline SVG
templates.env.globals.update(
    best_success_chart=best_success_chart,
    candidate_chart=candidate_chart,
    loss_chart=loss_chart,
    step_curves_chart=step_curves_chart,
    runs_test_chart=runs_test_chart,
    harness_success_chart=harness_success_chart,
    pareto_chart=pareto_chart,
)


def render(
    request: Request, template: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    return templates.TemplateResponse(request, template, context, status_code=status_code)


def from_htmx(request: Request) -> bool:
    """The request comes from a page's htmx (a form or button), not from a browser's navigation:
    its answer is swapped into the page, so an error must be a fragment, not a whole page."""
    return request.headers.get("hx-request") == "true"


def refusal(status: int, message: str) -> HTMLResponse:
    """A refused or failed htmx request as a fragment the page shows in place, beside the form
    or button that sent it (base.html puts a response marked X-Refusal into the slot its form
    names with data-refusals), whatever the status: htmx swaps no 4xx or 5xx by itself."""
    what = "the server failed" if status >= 500 else "refused"
    body = (
        f'<p class="box box-error refusal" data-status="{status}">'
        f"{what} (HTTP {status}): {escape(message.removeprefix('Refused: '))}</p>"
    )
    return HTMLResponse(body, status, headers={"X-Refusal": str(status)})
