"""llama.cpp through llama-cpp-python, on a GGUF file (`bakeoff.transforms.gguf_export`
writes and quantizes it): `llama-cpp` in F32, F16, Q8_0 or Q4_K_M.

Greedy decoding by llama.cpp's own sampler (top-k 1, temperature 0). Every request
starts from an empty context: llama-cpp-python reuses the KV cache of a prompt
that shares a prefix with the last one, which would time a prefill that never
ran. Perplexity comes from a second context that keeps the logits of every
position (`logits_all`), made on the first `nll` call only, so the generating
context is set up as a deployment would set it up.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bakeoff.generators import Batch, OnToken, llama_server, one_after_another, summed_nll
from bakeoff.generators.arrivals import Arrival, Served


def _open(path: Path, threads: int, logits_all: bool) -> Any:
    from llama_cpp import Llama

    context = _context_length(path)
    return Llama(
        model_path=str(path),
        n_ctx=context,
        n_batch=context,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=logits_all,
        verbose=False,
    )


def _context_length(path: Path) -> int:
    import gguf

    reader = gguf.GGUFReader(str(path))
    arch = reader.fields["general.architecture"]
    name = bytes(arch.parts[arch.data[0]]).decode()
    field = reader.fields[f"{name}.context_length"]
    return int(field.parts[field.data[0]][0])


class LlamaCppGenerator:
    runtime = "llama-cpp"

    def __init__(self, path: Path, threads: int) -> None:
        self.path = path
        self.threads = threads
        self.llm = _open(path, threads, logits_all=False)
        # The model's own positions: llama.cpp rounds its context up (to 256).
        self.max_positions = _context_length(path)
        self.eos = self.llm.token_eos()
        self._scorer: Any = None
        self.settings: dict[str, Any] = {
            "threads": threads,
            "context": self.llm.n_ctx(),
            # llama-cpp-python's Llama decodes one sequence at a time (llama.cpp's
            # server batches; its Python binding does not).
            "batching": "none: requests submitted together are answered one after another",
        }
        # Arrivals over time go through llama.cpp's own server, whose slots batch.
        self._server: llama_server.LlamaServer | None = None
        self._server_binary = llama_server.binary()
        if self._server_binary is not None:
            self.serve = self._serve_through_slots
            self.settings["server_batching"] = (
                f"continuous batching: llama.cpp's server, {llama_server.SLOTS} slots "
                "(--parallel), in a process of its own"
            )
            self.settings["llama_server"] = llama_server.settings(
                self._server_binary, threads, self.max_positions
            )
        else:
            self.settings["server_batching"] = (
                "none: one request at a time (llama.cpp's server, whose slots batch, is not "
                f"installed: {llama_server.INSTALL})"
            )

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        if len(prompt) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"a {len(prompt)}-token prompt plus {max_new_tokens} new tokens exceeds the "
                f"model's {self.max_positions} positions"
            )
        self.llm.reset()  # no KV-cache reuse across requests (see the module's text)
        out: list[int] = []
        for token in self.llm.generate(
            list(prompt), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0
        ):
            if token == self.eos:
                break
            on_token(int(token))
            out.append(int(token))
            if len(out) >= max_new_tokens:
                break
        return out

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Batch:
        return one_after_another(self.generate, prompts, max_new_tokens)

    def _serve_through_slots(
        self, schedule: Sequence[Arrival], max_new_tokens: int
    ) -> list[Served]:
        """Requests as they arrive, through llama-server's slots: started once for this
        worker on the same GGUF file, and warmed up with every prompt before the
        first schedule (its first requests would otherwise pay for it)."""
        if self._server is None:
            assert self._server_binary is not None  # `serve` is set only where there is one
            log = self.path.parent / f"llama-server-{self.path.stem}.log"
            self._server = llama_server.LlamaServer(
                self._server_binary, self.path, self.threads, self.max_positions, log
            )
            for prompt in {tuple(a.prompt) for a in schedule}:
                self._server.send([Arrival(0, list(prompt))], max_new_tokens)
        return self._server.send(schedule, max_new_tokens)

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        if len(tokens) < 2:
            return 0.0, 0
        if self._scorer is None:
            self._scorer = _open(self.path, self.threads, logits_all=True)
        scorer = self._scorer
        scorer.reset()
        scorer.eval(list(tokens))
        return summed_nll(scorer.scores[: len(tokens) - 1], tokens[1:]), len(tokens) - 1


def load(runtime: str, path: Path, threads: int, precision: str = "fp32") -> LlamaCppGenerator:
    # `precision`: the file (or folder) given was built at it
    return LlamaCppGenerator(path, threads)
