"""The language split of benchmarks/multilingual.py on fixed strings (lingua, no embedding model)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from toolsearch.evaluation import LabeledQuery

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "multilingual.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("multilingual_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module while the class is made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def detector(bench: ModuleType) -> Any:
    # A few languages keep this fast (lingua loads a model per candidate language); the benchmark
    # uses all of them, through the same classify().
    return bench.make_detector(["en", "es", "pt", "de", "fr", "id", "zh", "ko"])


@pytest.mark.parametrize(
    ("query", "language", "group"),
    [
        ("我想知道上海目前的天气状况，可以帮我查询吗？顺便使用摄氏度来显示温度。", "zh", "non-en"),  # noqa: RUF001
        ("최근 임진왜란에 대한 정보를 찾고 싶어요. 인터넷에서 검색해 주세요.", "ko", "non-en"),
        ("¿Podrías decirme las condiciones actuales del clima en Cancún y Tulum?", "es", "non-en"),
        ("Find the area of a triangle with a base of 10 units and height of 5 units.", "en", "en"),
        # the request is English; the Chinese is data inside a fence
        ("Could you extract the names and ages from this text? ```我叫李雷，今年18，我姐姐叫李丽```", "en", "en"),  # noqa: RUF001
        # a Korean request around English product names and identifiers
        ("집에 있는 LG ThinQ 에어컨을 제습 모드로 설정하고 싶어요. target_temp=22", "ko", "non-en"),
        ('get_weather(city="Paris", days=3)', "", "code"),
        ('{"city": "Paris", "units": "metric", "days": 3}', "", "code"),
    ],
)
def test_classify_puts_each_query_in_its_group(
    bench: ModuleType, detector: Any, query: str, language: str, group: str
) -> None:
    label = bench.classify(query, detector)
    assert (label.language, label.group) == (language, group), label


def test_a_low_confidence_guess_is_unsure_not_non_english(bench: ModuleType, detector: Any) -> None:
    label = bench.classify("¿Podrías decirme las condiciones actuales del clima?", detector, confidence=1.01)
    assert (label.language, label.group) == ("es", "unsure")


def test_request_text_keeps_words_and_drops_code(bench: ModuleType) -> None:
    text = bench.request_text("I'd like the song 'Dil Nu' by getUserById on Spotify.com at 11 PM, see ```x = 1```")
    assert text == "I'd like the song by on at PM, see"


def test_split_pairs_non_english_with_a_seeded_english_sample(bench: ModuleType) -> None:
    queries = [LabeledQuery(f"q{i}", f"query {i}", (f"tool{i}",)) for i in range(10)]
    groups = ["non-en", "en", "en", "unsure", "non-en", "en", "code", "en", "en", "en"]
    labels = [bench.LanguageLabel("ko" if g == "non-en" else "en", 1.0, g) for g in groups]
    foreign, english = bench.split(queries, labels, seed=0)
    assert [q.id for q in foreign] == ["q0", "q4"] and {q.subset for q in foreign} == {"ko"}
    assert len(english) == 2 and {q.subset for q in english} == {"en"}
    assert {q.id for q in english} <= {"q1", "q2", "q5", "q7", "q8", "q9"}
    assert [q.id for q in bench.split(queries, labels, seed=0)[1]] == [q.id for q in english]


def test_group_metrics_weigh_languages_by_query_count(bench: ModuleType) -> None:
    by_subset = {
        "zh": {"queries": 3, "R@5": 1.0, "nDCG@10": 0.5},
        "ko": {"queries": 1, "R@5": 0.0, "nDCG@10": 1.0},
        "en": {"queries": 4, "R@5": 0.25, "nDCG@10": 0.75},
    }
    assert bench.group_metrics(by_subset) == {
        "non-English": {"queries": 4, "R@5": 0.75, "nDCG@10": 0.625},
        "English": {"queries": 4, "R@5": 0.25, "nDCG@10": 0.75},
    }
