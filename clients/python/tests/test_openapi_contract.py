"""The client against the node's OpenAPI document (the live node's when GANTRY_URL is set)."""
from __future__ import annotations

import pytest

from gantry_client import routes as routes_mod
from gantry_client.types import SCHEMAS, TaskEvent

import contract


@pytest.fixture(scope="module")
def doc():
    return contract.load_document()


def client_source() -> str:
    return (contract.PACKAGE / "client.py").read_text()


def test_every_route_matches_the_document(doc):
    assert contract.check_routes(doc, routes_mod.ROUTES) == []
    assert contract.check_errors(doc, routes_mod.ERROR_SCHEMA, routes_mod.ERROR_READS) == []


def test_every_typeddict_matches_its_component(doc):
    assert contract.check_typeddicts(doc, SCHEMAS) == []


def test_every_field_the_client_reads_is_declared():
    reads = contract.literal_reads(client_source())
    assert any(":" in r for r in reads), "the scan sees the client's field() reads"
    assert contract.check_source(routes_mod.ROUTES, routes_mod.ERROR_READS, set(TaskEvent.__annotations__), client_source()) == []


def test_the_checks_catch_a_bogus_field(doc):
    # a field the document lacks, in each place the client declares one, is reported
    r = routes_mod.ROUTES["get_task"]
    bad = dict(routes_mod.ROUTES, get_task=r._replace(reads=r.reads + ("bogus_field",)))
    assert any("bogus_field" in p for p in contract.check_routes(doc, bad))
    p = routes_mod.ROUTES["presign"]
    bad = dict(routes_mod.ROUTES, presign=p._replace(body=p.body + ("bogus_body",)))
    assert any("bogus_body" in x for x in contract.check_routes(doc, bad))
    bad = dict(routes_mod.ROUTES, nope=routes_mod.Route("GET", "/r/nope/{x}", 200, "Task"))
    assert any("no such operation" in x for x in contract.check_routes(doc, bad))
    from typing import TypedDict

    Bogus = TypedDict("Bogus", {"task_id": str, "bogus_key": str})
    assert any("bogus_key" in x for x in contract.check_typeddicts(doc, {"RunAccepted": Bogus}))
    src = client_source() + '\n\ndef _x(d):\n    return d["bogus_read"], field("get_task", d, "bogus_too")\n'
    problems = contract.check_source(routes_mod.ROUTES, routes_mod.ERROR_READS, set(TaskEvent.__annotations__), src)
    assert any("bogus_read" in x for x in problems) and any("bogus_too" in x for x in problems)
