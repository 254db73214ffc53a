"""Recording a step in as few host calls as possible (runtime/program.py recording_calls): a pipeline is set only
where it changes, a bind group only where it or the pipeline does. No GPU: stand-in objects."""

from __future__ import annotations

from gpuengine.runtime.program import recording_calls


def test_pipelines_and_bind_groups_are_set_only_when_they_change():
    a, b = object(), object()  # pipelines
    g, h = object(), object()  # bind groups
    hot = [(a, g, 1, 1, 1), (a, h, 2, 1, 1), (a, h, 3, 1, 1), (b, h, 4, 1, 1), (b, g, 5, 1, 1), (a, g, 6, 1, 1)]
    calls = recording_calls(hot)
    assert [c[2:] for c in calls] == [c[2:] for c in hot]  # every dispatch, in order, with its workgroups
    assert [(p is not None, q is not None) for p, q, *_ in calls] == [
        (True, True), (False, True), (False, False), (True, True), (False, True), (True, True)]
    # what a compute pass holds at each dispatch is what the step asked for
    pipeline = bind_group = None
    for (p, q, *_), (want_p, want_q, *_) in zip(calls, hot):
        pipeline, bind_group = p or pipeline, q or bind_group
        assert pipeline is want_p and bind_group is want_q


def test_no_dispatch_no_call():
    assert recording_calls([]) == []
