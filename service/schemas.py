"""Wire format: request and response bodies, and the one error body."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from .encoding import check_interactions

__all__ = [
    "CreateModelRequest",
    "DenseFeatures",
    "ErrorBody",
    "Event",
    "HashedFeatures",
    "Item",
    "LearnRequest",
    "LearnResponse",
    "ModelInfo",
    "ModelList",
    "ScoreRequest",
    "ScoreResponse",
]

MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"

_Strict = ConfigDict(extra="forbid", allow_inf_nan=False)

# Named features: values are strings, numbers, booleans or null, or one level of nested
# objects (namespaces) of those. The encoder checks the values (and names the offending
# one); validating them here as a union per value tripled the parse time of a batch.
_SCALAR_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"},
                            {"type": "null"}]}
Features = Annotated[
    dict[str, Any],
    WithJsonSchema({
        "type": "object",
        "additionalProperties": {"anyOf": [
            _SCALAR_SCHEMA, {"type": "object", "additionalProperties": _SCALAR_SCHEMA}]},
    }),
]


def _label(value: Any) -> int:
    """±1 from 0/1, -1/+1 or true/false (one clear message for anything else)."""
    if value is True or value is False:
        return 1 if value else -1
    if type(value) in (int, float) and value in (0, 1, -1):
        return 1 if value == 1 else -1
    raise ValueError("label must be 0 or 1, -1 or +1, or true/false")


Label = Annotated[int, BeforeValidator(_label)]


class DenseFeatures(BaseModel):
    """Every item is a list of ``dim`` floats under ``x``."""

    model_config = _Strict
    kind: Literal["dense"]
    dim: int = Field(ge=1, le=1 << 16)


class HashedFeatures(BaseModel):
    """Named features under ``features``, hashed into 2^bits dimensions."""

    model_config = _Strict
    kind: Literal["hashed"]
    bits: int = Field(ge=1, le=22)
    interactions: list[list[str]] | None = Field(
        None, max_length=32, description="crossed features, as Vowpal Wabbit's -q: each "
        "a list of 2 or 3 top-level feature or namespace names, e.g. [[\"device\", "
        "\"banner_pos\"], [\"user\", \"site\"]]")

    @field_validator("interactions")
    @classmethod
    def _interactions(cls, v: list[list[str]] | None) -> list[list[str]] | None:
        check_interactions(v)
        return v


FeatureSpec = Annotated[DenseFeatures | HashedFeatures, Field(discriminator="kind")]


class CandidateSpec(BaseModel):
    """One candidate of an ``auto`` model."""

    model_config = ConfigDict(extra="forbid")
    learner: str = Field(description="one of GET /learners (not 'auto')")
    params: dict[str, Any] = Field(default_factory=dict, description="its parameters")


class FeedbackSpec(BaseModel):
    """Delayed labels: scored items kept by id, labelled later, negative after a timeout."""

    model_config = _Strict
    window_s: float = Field(gt=0, le=30 * 86_400, description="seconds a scored item with an "
                            "id is kept for its label (at most 30 days)")
    negative_after_s: float | None = Field(
        None, gt=0, description="seconds after which an item with no label is learned as a "
        "negative (at most window_s); null: only explicit labels are learned")
    max_pending: int = Field(1_000_000, ge=1, le=100_000_000, description="impressions kept "
                             "at most; items scored beyond it are not kept (the /score "
                             "response's 'kept' says how many were)")

    @model_validator(mode="after")
    def _timeout_within_window(self) -> FeedbackSpec:
        if self.negative_after_s is not None and self.negative_after_s > self.window_s:
            raise ValueError("negative_after_s must be at most window_s: an impression must "
                             "still be kept when its timeout comes")
        return self


class IngestSpec(BaseModel):
    """Events fed from a Redis stream (Redis store only), by the model's owner."""

    model_config = _Strict
    redis_stream: str = Field(min_length=1, max_length=512, description="the stream's key; "
                              "each entry's field 'events' holds a JSON array shaped like "
                              "/learn's events (give ids: they make redelivery safe)")
    group: str = Field("aucstream", min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]+$",
                       description="the consumer group (created if missing)")
    start: Literal["earliest", "latest"] = Field(
        "earliest", description="where a new group starts: the stream's first entry, or "
        "entries added from now on")
    dead_letter: str | None = Field(
        None, min_length=1, max_length=512, description="the stream that takes entries that "
        "cannot be learned, with their error (default: the stream's key + ':dead')")


class CreateModelRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "ads",
                    "learner": "cbr_diag_fifo",
                    "params": {"C": 0.1},
                    "features": {"kind": "hashed", "bits": 20},
                }
            ]
        },
    )
    name: str = Field(pattern=MODEL_NAME, description="letters, digits, '_', '.', '-'")
    learner: str | None = Field(
        None, description="one of GET /learners; 'auto' (or omitted, with candidates) "
        "serves the best of several candidates")
    params: dict[str, Any] = Field(default_factory=dict, description="learner parameters")
    candidates: list[CandidateSpec] | None = Field(
        None, min_length=1, max_length=16,
        description="the candidates of an 'auto' model (default: a built-in set chosen by "
        "the feature kind and dimension)")
    features: FeatureSpec
    seed: int = Field(0, ge=0, le=2**63 - 1)
    standardize: bool = Field(
        False, description="online standardisation (running mean/variance), dense only"
    )
    rolling_window: int | None = Field(
        None, ge=1, le=1_000_000, description="events in the rolling AUC (default: server's)"
    )
    feedback: FeedbackSpec | None = Field(
        None, description="delayed labels (the ad-click flow): /score keeps items that carry "
        "an 'id', /learn takes {id, label} for them, and unlabelled ones become negatives "
        "after negative_after_s")
    ingest: IngestSpec | None = Field(
        None, description="learn from a Redis stream too (Redis store only): the model's "
        "owner reads it through a consumer group and acknowledges an entry once its events "
        "are in the durable log; bad entries go to a dead-letter stream")


# An event or item carries x or features, never both (the schema says so too).
_ONE_OF_X_OR_FEATURES = {"oneOf": [{"required": ["x"], "not": {"required": ["features"]}},
                                   {"required": ["features"], "not": {"required": ["x"]}}]}


def _x_or_features(obj: Any) -> Any:
    # Neither: the encoder says which one the model takes, naming the field.
    if obj.x is not None and obj.features is not None:
        raise ValueError("give either 'x' (dense models) or 'features' (hashed models), "
                         "not both")
    return obj


class Event(BaseModel):
    """A labelled event: ``x`` (dense) or ``features`` (hashed), a label and an optional id.

    For a model with ``feedback``, an event with neither ``x`` nor ``features`` is the
    label of the scored item with that ``id``."""

    model_config = ConfigDict(**_Strict, json_schema_extra={
        "oneOf": [*_ONE_OF_X_OR_FEATURES["oneOf"],
                  {"required": ["id"], "not": {"anyOf": [{"required": ["x"]},
                                                         {"required": ["features"]}]}}],
        "examples": [{"features": {"site": "news.example", "device": {"type": "phone"},
                                   "price": 0.35}, "label": 1, "id": "imp-81723"},
                     {"x": [0.3, -1.2, 4.0], "label": 0},
                     {"id": "imp-81723", "label": 1}]})
    x: list[StrictFloat | StrictInt] | None = None
    features: Features | None = None
    label: Label = Field(description="0/1, -1/+1 or false/true; 1, +1, true = positive")
    id: str | None = Field(None, min_length=1, max_length=256)

    _check = model_validator(mode="after")(_x_or_features)


class Item(BaseModel):
    """A candidate to score: ``x`` or ``features``, as the model's events."""

    model_config = ConfigDict(**_Strict, json_schema_extra={
        **_ONE_OF_X_OR_FEATURES,
        "examples": [{"features": {"site": "news.example", "price": 0.35}},
                     {"x": [0.3, -1.2, 4.0]}]})
    x: list[StrictFloat | StrictInt] | None = None
    features: Features | None = None
    id: str | None = Field(None, min_length=1, max_length=256, description="models with "
                           "feedback keep the item under this id for its label")

    _check = model_validator(mode="after")(_x_or_features)


class LearnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "ads", "events": [
            {"features": {"site": "news.example", "device": {"type": "phone"}}, "label": 1,
             "id": "imp-1"},
            {"features": {"site": "shop.example", "device": {"type": "tv"}}, "label": 0,
             "id": "imp-2"}]}]})
    model: str = Field(pattern=MODEL_NAME)
    events: list[Event] = Field(min_length=1)


class LearnResponse(BaseModel):
    accepted: int = Field(description="events learned by this request")
    duplicates: int = Field(description="events skipped because their id was seen before")
    version: int = Field(description="events applied to the model so far")
    unmatched: list[str] | None = Field(
        None, description="models with feedback: ids of label-only events with no kept item "
        "(unknown, or expired after the model's feedback window): not learned")


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "ads", "items": [{"features": {"site": "news.example"}},
                                   {"features": {"site": "shop.example"}}], "top_k": 1}]})
    model: str = Field(pattern=MODEL_NAME)
    items: list[Item] = Field(min_length=1)
    top_k: int | None = Field(None, ge=1, description="length of the ranking (default: all)")


class ScoreResponse(BaseModel):
    scores: list[float] = Field(description="one per item, in request order")
    probabilities: list[float] = Field(
        description="P(positive) of each item, in request order: the model's scores "
        "through its online Platt calibration (same order as the scores)")
    ranking: list[int] = Field(description="item indices, best first")
    version: int = Field(description="model version that scored")
    kept: int | None = Field(None, description="models with feedback: items with an id kept "
                             "for their label by this request (ids kept already, and items "
                             "beyond max_pending, are not)")


class ClassCounts(BaseModel):
    negative: int
    positive: int


class CheckpointInfo(BaseModel):
    version: int
    age_seconds: float


class Quarantine(BaseModel):
    reason: str = Field(description="why the model cannot be recovered or applied")
    since: float = Field(description="unix seconds")


class CandidateInfo(BaseModel):
    learner: str
    params: dict[str, Any]
    quality: float | None = Field(
        description="AUC of its test-then-train scores within the recent windows (null "
        "before the first window with both classes)")
    serving: bool


class CalibrationInfo(BaseModel):
    a: float = Field(description="probability = 1 / (1 + exp(-(a * score + b))); a >= 0")
    b: float
    pairs: int = Field(description="test-then-train pairs kept (up to 10,000)")
    fitted_on: int = Field(description="pairs the map was last fitted on: the newest that "
                           "hold 100 of each class, at least 1,000 (refitted every 500 "
                           "events)")
    log_loss: float | None = Field(description="mean log loss of the probabilities given to "
                                   "the window's events before they were learned")
    positive_rate: float | None = Field(description="share of positives in the window")


class ModelInfo(BaseModel):
    name: str
    status: Literal["serving", "quarantined"] = Field(
        description="quarantined: it could not be recovered or applied; its requests "
        "answer 503 (see quarantine.reason) while every other model serves")
    quarantine: Quarantine | None = None
    learner: str
    params: dict[str, Any]
    features: dict[str, Any]
    seed: int
    standardize: bool
    created_at: float
    version: int | None = Field(description="events applied (null while quarantined)")
    owner: str | None = Field(
        None, description="the replica that learns the model (holds its lease; the others "
        "serve its publications), as this replica last saw; null while none does")
    events: ClassCounts | None
    rolling_auc: float | None = Field(description="exact AUC over the last rolling_window events")
    rolling_window: int
    ingest: dict[str, Any] | None = Field(None, description="the stream it learns from, "
                                          "and the ingestion's counts")
    feedback: dict[str, Any] | None = Field(None, description="the feedback configuration, "
                                            "and pending impressions by status")
    calibration: CalibrationInfo | None = Field(
        None, description="how /score's probabilities are made (null while quarantined)")
    buffer_fill: ClassCounts | None
    last_checkpoint: CheckpointInfo | None
    memory_bytes: int | None = Field(
        None, description="bytes this process holds for the model: learned state, scoring "
        "snapshot, scaler, rolling AUC and feature cache (null while quarantined)")
    serving_candidate: int | None = Field(
        None, description="'auto' models: the index of the candidate that scores")
    pinned_candidate: int | None = Field(
        None, description="'auto' models: the pinned candidate (POST /models/{name}/pin), "
        "which serves whatever the windows say; null when none is")
    promotions: int | None = Field(
        None, description="'auto' models: how many times the chosen candidate changed")
    candidates: list[CandidateInfo] | None = Field(
        None, description="'auto' models: each candidate and its recent quality")


class ModelList(BaseModel):
    models: list[ModelInfo]


class ErrorDetail(BaseModel):
    loc: list[str | int]
    msg: str


class ErrorBody(BaseModel):
    error: str = Field(description="a short reason code, e.g. validation_error, not_found")
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)


class PinRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    candidate: int = Field(ge=0, description="index into the model's candidates")

