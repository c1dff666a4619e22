"""`bakeoff serve`: a measured candidate behind the Open Inference Protocol (v2).

The parts, in the order a request meets them:
- `server`: uvicorn, loopback by default, a token off loopback, the drain on SIGTERM;
- `app`: the FastAPI endpoints, the token check, body limits;
- `serving`: what the endpoints answer from: loading, readiness, draining, infer;
- `protocol`: the JSON and binary (Triton extension) tensor codec;
- `batcher`: requests merged up to a number of rows, run on N instances;
- `model`: what is served (an export folder, loaded by `bakeoff.export.load`);
- `source`: the candidate chosen from the run's measurements (the batching and
  instances: `bakeoff.export.auto`, which the Triton export shares);
- `metrics`: Prometheus counters and histograms;
- `schemas`: the OpenAPI document (the response bodies, the infer endpoints).

FastAPI, uvicorn and prometheus-client come with `pip install bakeoff[serve]`.
"""

from bakeoff.serve.app import create_app
from bakeoff.serve.model import ExportedModel, Runner, Servable, ServedSpec, TensorSpec
from bakeoff.serve.server import serve
from bakeoff.serve.serving import ServeSettings, Serving

__all__ = [
    "ExportedModel",
    "Runner",
    "Servable",
    "ServeSettings",
    "ServedSpec",
    "Serving",
    "TensorSpec",
    "create_app",
    "serve",
]
