"""An edited catalog's name table is derived from the one before and answers as a fresh build (toolsearch.names)."""

from __future__ import annotations

import random

from toolsearch import Catalog, Tool
from toolsearch.names import NameTable
from toolsearch.text import split_identifier

NAMESPACES = ["github", "gitlab", "jira", "svc1", "_", None, None, None]
VERBS = ["get", "list", "create", "update", "delete", "search", "send"]
NOUNS = ["user", "issue", "weather", "profile", "message", "repo", "forecast"]


def generated_names(rng: random.Random, count: int) -> list[tuple[str, str | None]]:
    """Names and namespaces whose forms collide: the same upstream name under several namespaces, case and
    camel-case variants of one name, a namespace (`_`) whose prefixed and unprefixed forms split alike."""
    made: dict[str, str | None] = {}
    while len(made) < count:
        namespace = rng.choice(NAMESPACES)
        words = [rng.choice(VERBS), *rng.sample(NOUNS, rng.randint(0, 2))]
        style = rng.randrange(4)
        base = (
            "_".join(words) if style == 0
            else words[0] + "".join(w.title() for w in words[1:]) if style == 1
            else "_".join(w.title() for w in words) if style == 2
            else ".".join(words)
        )
        name = f"{namespace}__{base}" if namespace and rng.random() < 0.7 else base
        made.setdefault(name, namespace)
    return list(made.items())


def queries_for(names: list[str]) -> list[str]:
    """Requests that reach every form of every name: as written, folded, split into words, inside a sentence."""
    out = ["", "create an issue please", "GET_WEATHER", "use get_weather and list_repo now"]
    for name in names:
        rest = name.split("__", 1)[-1]
        for form in {name, rest}:
            words = " ".join(split_identifier(form))
            out += [form, form.upper(), words, f"I need {words} now", f"call {form}(x=1), then {rest}"]
    return out


def fresh(catalog: Catalog) -> NameTable:
    return NameTable(catalog.names, [t.namespace for t in catalog])


def answers(table: NameTable, queries: list[str]) -> list[list[str]]:
    return [table.named(q, whole_only=whole) for q in queries for whole in (False, True)]


def test_a_derived_name_table_answers_as_a_fresh_build_through_random_edits() -> None:
    rng = random.Random(51)
    pool = generated_names(rng, 900)
    catalog = Catalog(Tool(n, "v0", namespace=ns) for n, ns in pool[:300])
    waiting, removed = pool[300:], []
    for step in range(150):
        if rng.random() < 0.9:  # mostly derived; now and then the next table is built from scratch
            catalog.name_table  # noqa: B018 (built on first use)
        names = catalog.names
        remove = rng.sample(names, rng.randint(0, 4)) + ["no_such_tool"] * rng.randint(0, 1)
        upsert = [Tool(n, f"v{step}", namespace=ns) for n, ns in (waiting.pop() for _ in range(rng.randint(0, 3)))]
        if removed and rng.random() < 0.3:  # a removed name comes back, under its namespace or another
            upsert.append(Tool(removed.pop(rng.randrange(len(removed))), namespace=rng.choice(NAMESPACES)))
        # replaced: under the same namespace, another one or none; some removed and added back in one update
        for name in rng.sample(names, rng.randint(0, 4)):
            if name not in {t.name for t in upsert}:
                namespace = catalog[name].namespace if rng.random() < 0.5 else rng.choice(NAMESPACES)
                upsert.append(Tool(name, f"v{step}", namespace=namespace))
        rng.shuffle(upsert)
        newer = catalog.updated(upsert=upsert, remove=remove)
        removed += [n for n in remove if n in catalog and n not in newer]
        touched = {*remove, *(t.name for t in upsert)}
        queries = queries_for(sorted(touched | set(rng.sample(names, 40))))
        assert answers(newer.name_table, queries) == answers(fresh(newer), queries), step
        catalog = newer
    every = queries_for([n for n, _ in pool])
    assert answers(catalog.name_table, every) == answers(fresh(catalog), every)


def test_an_edited_catalog_carries_its_derived_table_and_the_old_table_is_unchanged() -> None:
    tools = [
        Tool("github__create_issue", namespace="github"),
        Tool("gitlab__create_issue", namespace="gitlab"),
        Tool("get_weather"),
        Tool("Get_Weather"),
        Tool("getWeatherForecast"),
        Tool("old__list_repo"),
    ]
    old = Catalog(tools)
    old_table = old.name_table
    queries = queries_for([*old.names, "jira__create_issue", "get_weather_forecast", "new__list_repo"])
    before = answers(old_table, queries)
    newer = old.updated(
        upsert=[
            Tool("jira__create_issue", namespace="jira"),  # joins a form two others hold
            Tool("gitlab__create_issue"),  # its namespace dropped: no longer found as `create_issue`
            Tool("get_weather_forecast"),  # the words of getWeatherForecast
            # both newly found as `list_repo`: listed in catalog order (the replaced one kept its place)
            Tool("new__list_repo", namespace="new"),
            Tool("old__list_repo", namespace="old"),
        ],
        remove=["Get_Weather"],
    )
    # derived when the catalog is made: the first search after an edit does not read every name again
    assert getattr(newer, "_name_table", None) is not None
    assert answers(newer.name_table, queries) == answers(fresh(newer), queries)
    assert newer.name_table.named("create_issue") == ["github__create_issue", "jira__create_issue"]
    assert newer.name_table.named("get weather forecast") == ["getWeatherForecast", "get_weather_forecast"]
    assert newer.name_table.named("list_repo") == ["old__list_repo", "new__list_repo"]
    # the old catalog, and searches still holding it, answer as before
    assert old.name_table is old_table
    assert answers(old_table, queries) == before == answers(fresh(old), queries)
    assert old_table.named("create_issue") == ["github__create_issue", "gitlab__create_issue"]
