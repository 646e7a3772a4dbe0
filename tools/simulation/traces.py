"""The spans of one run: an OpenTelemetry provider of the run's own, whose ids are counted rather than drawn
(the run's random generators stay the run's), and whose ended spans are kept for the end-of-run checks.

Every process of the run handles its messages in spans as ``function_app.py`` does (``actors.consume``), and
the messages carry the context they were sent from, so the checks can see whether an order's hops formed
one trace whatever crashed, was lost, duplicated or redelivered on the way.
"""

from __future__ import annotations

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Tracer

from engine import tracing


class _Counting(IdGenerator):
    """Ids in order: the same run gets the same ids, and no draw from a generator the run seeds."""

    def __init__(self) -> None:
        self._next = 0

    def _take(self) -> int:
        self._next += 1
        return self._next

    def generate_span_id(self) -> int:
        """The next id."""
        return self._take()

    def generate_trace_id(self) -> int:
        """The next id, in the high half too, so that no trace id equals a span id."""
        return self._take() << 64 | self._next


class _Kept(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []
        self.started: set[int] = set()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Note its id: a span still open when the run ends is a parent all the same."""
        self.started.add(span.context.span_id)

    def on_end(self, span: ReadableSpan) -> None:
        """Keep it."""
        self.spans.append(span)


class RunSpans:
    """The provider of one run, installed as the engine's tracer between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self._kept = _Kept()
        self._provider = TracerProvider(resource=Resource.get_empty(), id_generator=_Counting())
        self._provider.add_span_processor(self._kept)
        self._before: Tracer | None = None

    @property
    def spans(self) -> list[ReadableSpan]:
        """The spans that ended, in the order they ended."""
        return self._kept.spans

    @property
    def started(self) -> set[int]:
        """The ids of every span that started, ended or not."""
        return self._kept.started

    def start(self) -> None:
        """Spans start from this run's provider."""
        self._before = tracing.use_tracer(self._provider.get_tracer(tracing.TRACER_NAME))

    def stop(self) -> None:
        """Spans start from what they started from before."""
        tracing.use_tracer(self._before)
