"""The OpenAPI description of the server: the response bodies as pydantic models,
the infer request's JSON schema, and the path items of the two infer endpoints.

They document the API (and drive schemathesis); no response is built from them, the
endpoints write their JSON by hand.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from bakeoff.serve import protocol


class ErrorBody(BaseModel):
    error: str


class HealthBody(BaseModel):
    live: bool | None = None
    ready: bool | None = None
    reason: str | None = None


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]
    parameters: dict[str, Any] = {}


class OutputTensor(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    data: list[Any] | None = None
    parameters: dict[str, Any] | None = None


class InferResponse(BaseModel):
    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[OutputTensor]


_DATATYPE_NAMES = sorted(protocol.DATATYPES)
_INFER_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["inputs"],
    "properties": {
        "id": {"type": "string"},
        "parameters": {"type": "object"},
        "inputs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "shape", "datatype"],
                "properties": {
                    "name": {"type": "string"},
                    "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                    "datatype": {"type": "string", "enum": _DATATYPE_NAMES},
                    "parameters": {"type": "object"},
                    "data": {},
                },
            },
        },
        "outputs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "parameters": {"type": "object"}},
            },
        },
    },
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """FastAPI `responses` entries: each of these codes answers with an ErrorBody."""
    return {code: {"model": ErrorBody} for code in codes}


def infer_operations() -> tuple[dict[str, Any], dict[str, Any]]:
    """The OpenAPI path items of the two infer endpoints (answered by
    `app.answer_infer`, not by a FastAPI route) and the component schemas they refer to."""
    components: dict[str, Any] = {}
    for model in (InferResponse, ErrorBody):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema

    def ref(name: str) -> dict[str, Any]:
        return {"schema": {"$ref": f"#/components/schemas/{name}"}}

    def operation(operation_id: str, params: list[str]) -> dict[str, Any]:
        errors = {
            str(code): {
                "description": "an error",
                "content": {"application/json": ref("ErrorBody")},
            }
            for code in (400, 401, 404, 413, 500, 503)
        }
        return {
            "post": {
                "summary": "Infer",
                "operationId": operation_id,
                "parameters": [
                    {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                    for p in params
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _INFER_REQUEST_SCHEMA}},
                },
                "responses": {
                    "200": {
                        "description": "JSON, or JSON followed by binary tensors "
                        "(Inference-Header-Content-Length)",
                        "content": {
                            "application/json": ref("InferResponse"),
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary"}
                            },
                        },
                    },
                    **errors,
                },
            }
        }

    paths = {
        "/v2/models/{name}/infer": operation("model_infer", ["name"]),
        "/v2/models/{name}/versions/{version}/infer": operation(
            "model_version_infer", ["name", "version"]
        ),
    }
    return paths, components
