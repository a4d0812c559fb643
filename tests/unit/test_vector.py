"""Instant vectors decoded column by column give the frame the general decoder gives, or step aside."""

import json
from typing import Any

import pandas as pd
import pytest

from gpuwatch.sources.promclient import _parse
from gpuwatch.sources.vector import vector_frame


def _answer(samples: list[dict[str, Any]], **extra: Any) -> bytes:
    body = {"status": "success", "data": {"resultType": "vector", "result": samples}, **extra}
    # Prometheus writes compact JSON, non-ASCII as is
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _general(body: bytes) -> pd.DataFrame:
    return _parse(json.loads(body)["data"]["result"], instant=True).frame()


def _sample(value: str, at: float = 1795046400, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [at, value]}


def test_labels_values_and_absent_labels_as_the_general_decoder_has_them() -> None:
    body = _answer(
        [
            _sample("1.5", namespace="ml", pod="train-0", team="genai"),
            _sample("NaN", namespace="ml", pod="train-1"),  # no team: ""
            _sample("+Inf", namespace="ci", pod='quote"]},{"metric":{"pod":"x', team="ci"),
            _sample("-Inf", namespace="ünïcode", pod="back\\slash\\", node="n1"),
            _sample("2e-3", namespace="ml", pod="tiny", team="genai"),
        ]
    )
    frame = vector_frame(body)
    assert frame is not None
    pd.testing.assert_frame_equal(frame, _general(body))
    assert list(frame["team"]) == ["genai", "", "ci", "", "genai"]
    assert frame["pod"][2] == 'quote"]},{"metric":{"pod":"x'
    assert frame["value"].isna().tolist() == [False, True, True, True, False]  # ±Inf is NaN, as Points
    assert frame["value"][4] == pytest.approx(0.002)


def test_samples_without_labels_and_a_fractional_evaluation_time() -> None:
    body = _answer([_sample("7", at=1795046400.25)])
    frame = vector_frame(body)
    assert frame is not None
    pd.testing.assert_frame_equal(frame, _general(body))
    assert list(frame.columns) == ["timestamp", "value"]
    assert frame["timestamp"][0] == pd.Timestamp("2026-11-19T00:00:00.250Z")


@pytest.mark.parametrize(
    "body",
    [
        _answer([]),  # nothing to gain
        _answer([_sample("1", pod="a")], warnings=["too many series"]),
        _answer([_sample("1", at=1, pod="a"), _sample("2", at=2, pod="b")]),  # not one evaluation time
        _answer([_sample("not a number", pod="a")]),  # the general decoder makes it NaN
        b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
        b"<html>a proxy's login page</html>",
    ],
)
def test_anything_but_a_plain_vector_is_left_to_the_general_decoder(body: bytes) -> None:
    assert vector_frame(body) is None


def test_answers_too_large_to_decode_side_by_side_decode_the_same_one_at_a_time() -> None:
    """A month of per-pod series (~100 MB) is decoded one answer at a time: two threads decoding answers
    over 16 MB each get the frames the general decoder gives."""
    from concurrent.futures import ThreadPoolExecutor

    bodies = [
        _answer(
            [
                _sample(
                    f"{i % 97}.5", namespace=f"ns-{k}", pod=f"job-{i:06d}-worker", team="genai", pool="h100"
                )
                for i in range(150_000)
            ]
        )
        for k in range(2)
    ]
    assert min(len(b) for b in bodies) > 16 << 20
    with ThreadPoolExecutor(max_workers=2) as pool:
        frames = list(pool.map(vector_frame, bodies))
    for body, frame in zip(bodies, frames, strict=True):
        assert frame is not None
        assert len(frame) == 150_000
        pd.testing.assert_frame_equal(frame, _general(body))
