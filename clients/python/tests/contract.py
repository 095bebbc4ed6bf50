"""Holds the client to the node's OpenAPI document: every route of gantry_client.routes.ROUTES
(method, path, sk- security, body fields, header parameters, success status, response schema,
fields read), every TypedDict of gantry_client.types.SCHEMAS (keys, required keys), and every field
literal the client's source reads. Each check returns a list of problems (empty: honest)."""
from __future__ import annotations

import ast
import json
import os
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

PACKAGE = Path(__file__).resolve().parent.parent / "gantry_client"
REPO_DOC = Path(__file__).resolve().parents[3] / "packages" / "sdk" / "openapi.json"

Doc = Dict[str, Any]


def load_document() -> Doc:
    """The live node's /api/v1/openapi.json when GANTRY_URL is set, else the repository's copy."""
    url = os.environ.get("GANTRY_URL")
    if url:
        base = url.rstrip("/")
        base = base if base.endswith("/api/v1") else base + "/api/v1"
        with urllib.request.urlopen(base + "/openapi.json", timeout=30) as r:
            return json.loads(r.read())
    return json.loads(REPO_DOC.read_text())


def _resolve(doc: Doc, node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        cur: Any = doc
        for part in ref[2:].split("/"):
            cur = cur[part]
        node = cur
    return node


def properties_of(doc: Doc, schema: Any) -> Optional[Dict[str, Any]]:
    s = _resolve(doc, schema)
    if not isinstance(s, dict):
        return None
    return s.get("properties")


def check_routes(doc: Doc, routes: Dict[str, Any]) -> List[str]:
    problems: List[str] = []
    schemas = doc["components"]["schemas"]
    for name, r in routes.items():
        where = f"ROUTES[{name!r}] {r.method} {r.path}"
        op = doc["paths"].get(r.path, {}).get(r.method.lower())
        if op is None:
            problems.append(f"{where}: no such operation in the document")
            continue
        sec = [k for s in op.get("security", []) for k in s]
        if "integrationKey" not in sec:
            problems.append(f"{where}: not open to sk- credentials (security {sec})")
        params = {p["name"] for p in (_resolve(doc, p) for p in op.get("parameters", [])) if p.get("in") == "header"}
        for h in r.headers:
            if h not in params:
                problems.append(f"{where}: header {h} is not a documented parameter ({sorted(params)})")
        placeholders = {p.split("}")[0] for p in r.path.split("{")[1:]}
        path_params = {p["name"] for p in (_resolve(doc, p) for p in op.get("parameters", [])) if p.get("in") == "path"}
        if placeholders != path_params:
            problems.append(f"{where}: path parameters {sorted(placeholders)} vs documented {sorted(path_params)}")
        if r.body:
            body_schema = (((op.get("requestBody") or {}).get("content") or {}).get("application/json") or {}).get("schema")
            props = properties_of(doc, body_schema) if body_schema else None
            if props is None:
                problems.append(f"{where}: sends a JSON body the document does not describe")
            else:
                for f in r.body:
                    if f not in props:
                        problems.append(f"{where}: body field {f} is not in the request schema ({sorted(props)})")
        resp = op.get("responses", {}).get(str(r.status))
        if resp is None:
            problems.append(f"{where}: status {r.status} is not documented ({sorted(op.get('responses', {}))})")
            continue
        content = _resolve(doc, resp).get("content", {})
        if r.response is None:
            sse = content.get("text/event-stream")
            if sse is None:
                problems.append(f"{where}: not documented as text/event-stream")
                continue
            documented = set(sse.get("x-sse-events", {}))
            for e in r.events:
                if e not in documented:
                    problems.append(f"{where}: event {e} is not in x-sse-events ({sorted(documented)})")
            continue
        schema = (content.get("application/json") or {}).get("schema")
        if schema is None or schema.get("$ref") != f"#/components/schemas/{r.response}":
            problems.append(f"{where}: the {r.status} answer is not component {r.response} ({schema})")
            continue
        props = schemas[r.response].get("properties", {})
        for f in r.reads:
            if f not in props:
                problems.append(f"{where}: reads field {f}, not in component {r.response} ({sorted(props)})")
    return problems


def check_errors(doc: Doc, schema: str, reads: tuple) -> List[str]:
    props = doc["components"]["schemas"].get(schema, {}).get("properties", {})
    return [f"error envelope: field {f} is not in component {schema}" for f in reads if f not in props]


def check_typeddicts(doc: Doc, mapping: Dict[str, Any]) -> List[str]:
    problems: List[str] = []
    schemas = doc["components"]["schemas"]
    for component, td in mapping.items():
        s = schemas.get(component)
        if s is None:
            problems.append(f"TypedDict {td.__name__}: no component {component}")
            continue
        props = set(s.get("properties", {}))
        required = set(s.get("required", []))
        keys = set(td.__annotations__)
        for k in sorted(keys - props):
            problems.append(f"TypedDict {td.__name__}: key {k} is not in component {component}")
        for k in sorted(set(td.__required_keys__) - required):
            problems.append(f"TypedDict {td.__name__}: key {k} is required but optional in component {component}")
        for k in sorted(required - keys):
            problems.append(f"TypedDict {td.__name__}: misses required field {k} of component {component}")
    return problems


def literal_reads(source: str) -> Set[str]:
    """String literals the source reads as keys: x["k"] (load), x.get("k") (not os.environ's) and
    field("route", x, "k") (as "route:k")."""
    out: Set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            out.add(node.slice.value)
        on_environ = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "environ"
        if isinstance(node, ast.Call) and not on_environ and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            out.add(node.args[0].value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "field" and len(node.args) == 3:
            r, f = node.args[0], node.args[2]
            if isinstance(r, ast.Constant) and isinstance(f, ast.Constant):
                out.add(f"{r.value}:{f.value}")
    return out


def check_source(routes: Dict[str, Any], error_reads: tuple, own_keys: Set[str], source: str) -> List[str]:
    """Every key the client source reads is declared: field(route, _, f) with f in the route's reads,
    a bare literal read in some route's reads, the error envelope's reads or the client's own
    TaskEvent keys."""
    declared = {f for r in routes.values() for f in r.reads} | set(error_reads) | own_keys
    problems: List[str] = []
    for lit in sorted(literal_reads(source)):
        if ":" in lit:
            route, f = lit.split(":", 1)
            if route not in routes or f not in routes[route].reads:
                problems.append(f"client reads field({route!r}, {f!r}) not declared in ROUTES")
        elif lit not in declared:
            problems.append(f"client reads key {lit!r}, declared by no route")
    return problems
