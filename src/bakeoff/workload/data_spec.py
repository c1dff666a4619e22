"""The `[data]` table of a workload spec, as pydantic models: where the samples come
from (a factory, an .npz, text, a dataset, or inputs bakeoff makes) and how they are
laid out. The bottom of `bakeoff.workload`: `spec` builds the whole spec on these
and on `Strict`, the base of every spec model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

# [data] dataset formats: datasets' packaged readers of local files, and save_to_disk folders.
DatasetFormat = Literal["parquet", "csv", "json", "arrow", "disk"]
# The model input that a dataset's text column feeds (hf): tokenized as data.text is.
TEXT_INPUT = "text"
DEFAULT_MAX_LENGTH = 128


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetSource(Strict):
    """`[data] dataset`: a Hugging Face `datasets` dataset in local files, read offline."""

    path: str = Field(
        min_length=1,
        description="a data file or a folder of them, or a save_to_disk folder; relative to "
        "the workload file",
    )
    split: str | None = Field(
        None,
        description="the split to read (default: the only one; a single file is one split)",
    )
    format: DatasetFormat | None = Field(
        None,
        description="parquet, csv, json (JSON lines too), arrow, or disk (a save_to_disk "
        "folder); default: from the file's suffix, or disk for a save_to_disk folder",
    )


class GeneratedSpec(Strict):
    """`[data] generate`: inputs made from the model's signature (workload/generated.py)."""

    samples: PositiveInt = Field(128, description="how many samples to make")
    sequence_length: PositiveInt = Field(
        128, description="the length of every dynamic axis but the batch"
    )
    seed: NonNegativeInt = 0


class DataSpec(Strict):
    factory: str | None = None
    generate: GeneratedSpec | None = Field(
        None,
        description="onnx / openvino: inputs made from the model's own signature, "
        "e.g. generate = { samples = 128, sequence_length = 128 }",
    )
    path: str | None = None
    text: str | None = Field(
        None, description="hf: a UTF-8 file, one text per line, tokenized by the model's folder"
    )
    dataset: DatasetSource | None = Field(
        None, description='a local Hugging Face dataset: { path = "...", split, format }'
    )
    columns: dict[str, str] = Field(
        default_factory=dict,
        description='dataset: model input name -> column, e.g. { text = "sentence" } '
        "(hf: the input text is tokenized by the model's folder)",
    )
    labels: str | None = Field(
        None, description="dataset: the column of integer class labels (the accuracy metric)"
    )
    max_length: PositiveInt | None = Field(
        None,
        description=f"text: tokens per text, padded or truncated (default {DEFAULT_MAX_LENGTH})",
    )
    quality_samples: PositiveInt | None = Field(
        None, description="how many held-out samples the quality gate uses"
    )
    variable_axes: dict[str, list[NonNegativeInt]] = Field(
        default_factory=dict,
        description="input name -> axes besides the batch axis whose size may vary, "
        "e.g. { input_ids = [1], attention_mask = [1] } for the sequence length",
    )
    batch_axes: dict[str, NonNegativeInt] = Field(
        default_factory=dict,
        description="input name -> the axis its samples are on, where that is not 0, "
        "e.g. { state = 1 } for a recurrent state [layers, batch, hidden]",
    )
    constants: list[str] = Field(
        default_factory=list,
        description="inputs with no batch axis, fed unchanged to every call (a sample "
        "rate, say); a 0-d array is one by default",
    )
    prompts: str | None = Field(
        None, description="text-generation: a UTF-8 file, one prompt per line"
    )
    max_new_tokens: PositiveInt | None = Field(
        None, description="text-generation: tokens generated per prompt (greedy; default 32)"
    )
    perplexity_text: str | None = Field(
        None,
        description="text-generation: a UTF-8 file of held-out text, one passage per line, "
        "for the perplexity gate (default: the prompts)",
    )
    calibration_text: str | None = Field(
        None,
        description="text-generation: a UTF-8 file, one passage per line, that AWQ and GPTQ "
        "calibrate INT4 on (default: the prompts, which the token-agreement gate then "
        "reads on the very text the weights were tuned to)",
    )

    @property
    def tokenizes_text(self) -> bool:
        """Texts are tokenized by the model folder: data.text, a dataset's text column, or
        (kind hf) generated inputs, bakeoff's sample sentences."""
        return self.text is not None or TEXT_INPUT in self.columns or self.generate is not None

    @model_validator(mode="after")
    def _one_source(self) -> DataSpec:
        sources = (self.factory, self.path, self.text, self.dataset, self.prompts, self.generate)
        if sum(x is not None for x in sources) != 1:
            raise ValueError(
                'give exactly one of factory = "module:callable", path = "x.npz", '
                'text = "lines.txt", dataset = { path = "..." }, generate = {} (inputs '
                'from the model\'s signature) or prompts = "prompts.txt" (text-generation)'
            )
        if self.dataset is None and (self.columns or self.labels is not None):
            raise ValueError('columns and labels go with dataset = { path = "..." }')
        if self.dataset is not None and not self.columns:
            raise ValueError(
                'dataset needs columns = { input_name = "column" }: which columns feed which '
                'model inputs, e.g. columns = { text = "sentence" } for a text column'
            )
        for name, column in self.columns.items():
            if not name or not column:
                raise ValueError(f"columns: empty name in {{ {name!r} = {column!r} }}")
        if self.prompts is None and (
            self.max_new_tokens is not None
            or self.perplexity_text is not None
            or self.calibration_text is not None
        ):
            raise ValueError(
                "max_new_tokens, perplexity_text and calibration_text go with "
                'prompts = "prompts.txt"'
            )
        if self.max_length is not None and not self.tokenizes_text:
            raise ValueError(
                'max_length goes with text = "lines.txt" or a dataset\'s columns = { text = "..." }'
            )
        if self.factory is not None and ":" not in self.factory:
            raise ValueError(f'factory must look like "module:callable", got {self.factory!r}')
        return self
