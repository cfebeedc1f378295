"""One validated Settings object for the API, the CLI and the worker.

Everything on disk derives from NBL_HOME unless set explicitly, so two instances with different
NBL_HOME (tests, two users on one machine) share nothing: not the database, not the embedded
broker, not the model, publish or statistics directories.

Built where it is used (the app lifespan, a CLI command, the worker's startup), never at import. Its limits
and its webhook and event-stream fields are mixins of their own files (settings_limits.py, settings_events.py).
It is the only reader of NBL_* variables in service/, worker/ and cli/: the engine and the evaluation take
directories and limits as arguments (tests/test_settings_only_reader.py holds every other module there to
that). The Python client, installed on its own, reads its two for itself: NBL_API_URL and NBL_API_KEY
(clients/python/nbl_client/client.py; the `nbl` client commands get them through it).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from service.core.settings_events import EventSettings
from service.core.settings_limits import LimitSettings

HUB = "https://huggingface.co"


def _env(*names: str) -> AliasChoices:
    """The environment variables a setting reads."""
    return AliasChoices(*names)


class _AliasesOnly(EnvSettingsSource):
    """The environment by the aliases above only. populate_by_name (so that code may pass Settings(home=...))
    also makes pydantic-settings read a field's own name from the environment, case-insensitively: HOME
    was read as the home and SECRET_KEY as the Fernet key."""

    def __init__(self, settings_cls, **kw):
        super().__init__(settings_cls, **kw)
        self.config = {**self.config, "populate_by_name": False, "validate_by_name": False}


class Settings(LimitSettings, EventSettings, BaseSettings):
    """Where things live, the broker and the Hubs, recovery; the limits and the events' delivery are inherited
    (settings_limits.py, settings_events.py), read from the environment as these are."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, validate_default=True)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _AliasesOnly(settings_cls), dotenv_settings, file_secret_settings

    # --- where things live -------------------------------------------------------------------
    home: Path = Field(default=Path("~/.nbl"), validation_alias=_env("NBL_HOME"))
    database_url: str | None = Field(
        default=None,
        validation_alias=_env("DATABASE_URL"),
        description="SQLAlchemy URL; default sqlite:///$NBL_HOME/nbl.db",
    )
    db_pool_size: int = Field(
        default=20,
        ge=1,
        le=1000,
        validation_alias=_env("NBL_DB_POOL_SIZE"),
        description="Postgres connections a pool keeps open (SQLAlchemy pool_size; 10 more "
        "may open for a burst): the API holds one per request in flight, in two pools (its "
        "hot job reads', and the rest's)",
    )
    broker_url: str | None = Field(
        default=None,
        validation_alias=_env("BROKER_URL"),
        description="Celery broker; default the embedded kombu SQLAlchemy "
        "transport on sqla+sqlite:///$NBL_HOME/broker.db",
    )
    models_dir: Path | None = Field(
        default=None, validation_alias=_env("NBL_MODELS_DIR"), description="where `local:NAME` model ids resolve"
    )
    gguf_python: Path | None = Field(
        default=None,
        validation_alias=_env("NBL_GGUF_PYTHON"),
        description="the GGUF venv's python (publish.formats gguf:*, `nbl export`); "
        "default the checkout's .venv-gguf (`make gguf-env`)",
    )
    quant_python: Path | None = Field(
        default=None,
        validation_alias=_env("NBL_QUANT_PYTHON"),
        description="the quantization venv's python (publish.quantize, `nbl compress --quantize`); "
        "default the checkout's .venv-quant (`make quant-env`)",
    )
    publish_dir: Path | None = Field(
        default=None, validation_alias=_env("NBL_PUBLISH_DIR"), description="where publish {local_dir: NAME} writes"
    )
    stats_dir: Path | None = Field(default=None, validation_alias=_env("NBL_STATS_DIR"))
    data_dir: Path | None = Field(
        default=None,
        validation_alias=_env("NBL_DATA_DIR"),
        description="the offline data sets (c4, wikitext2, the evaluation tasks' files); "
        "unset: those names resolve to the Hub and the Hugging Face cache",
    )
    stats_cache_max_bytes: int = Field(
        default=50 * 10**9,
        ge=0,
        validation_alias=_env("NBL_STATS_CACHE_MAX_BYTES"),
        description="cap on the statistics cache, least recently used entries evicted first (nbl/lru.py); 0: no cache",
    )

    class_prices: str = Field(
        default="",
        validation_alias=_env("NBL_CLASS_PRICES"),
        description="NAME=PRICE per worker-hour of each worker class, comma-separated "
        "(gpu-80g=4.10,cpu=0.20): the estimate's cost; unset: no cost",
    )

    # --- queue ---------------------------------------------------------------------------------
    queue_name: str = Field(default="nbl", validation_alias=_env("NBL_QUEUE"), pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    worker_classes: str = Field(
        default="cpu=0x0/64,gpu-24g=1x24/128,gpu-80g=1x80/256,gpu-8x80g=8x80/1024",
        validation_alias=_env("NBL_WORKER_CLASSES"),
        description="NAME=DEVICESxDEVICE_GiB/HOST_GiB, smallest first; a job goes to the "
        "queue <NBL_QUEUE>-<NAME> of the first class that holds its estimate "
        "(nbl/sizing/classes.py)",
    )
    task_soft_time_limit_s: int = Field(
        default=6 * 3600 - 300, ge=60, validation_alias=_env("NBL_TASK_SOFT_TIME_LIMIT")
    )
    task_time_limit_s: int = Field(default=6 * 3600, ge=60, validation_alias=_env("NBL_TASK_TIME_LIMIT"))
    # Redis re-delivers an unacked message after this; it must outlive the longest task (acks_late).
    visibility_timeout_s: int | None = Field(default=None, validation_alias=_env("NBL_VISIBILITY_TIMEOUT"))
    publish_timeout_s: float = Field(
        default=3.0,
        gt=0,
        validation_alias=_env("NBL_PUBLISH_TIMEOUT"),
        description="how long the API tries to reach the broker before leaving a job for the reconciler",
    )

    # --- publishing ----------------------------------------------------------------------------
    hf_endpoint: str = Field(
        default=HUB,
        validation_alias=_env("NBL_HF_ENDPOINT"),
        description="the Hugging Face Hub the worker publishes to (a test server in tests)",
    )
    # huggingface_hub's own variables: the worker's downloads read them through huggingface_hub; the API's
    # config.json fetch (service/estimates/configs.py) reads them here.
    hf_read_endpoint: str = Field(
        default=HUB, validation_alias=_env("HF_ENDPOINT"), description="the Hugging Face Hub models are read from"
    )
    hf_token: SecretStr | None = Field(
        default=None,
        validation_alias=_env("HF_TOKEN"),
        description="the token of those reads (a gated model's config.json)",
    )
    hf_hub_offline: bool = Field(
        default=False,
        validation_alias=_env("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"),
        description="never reach the Hub: the API fetches no config.json (a Hub model's "
        "estimate is absent, as when the Hub is down)",
    )
    secret_key: SecretStr | None = Field(
        default=None,
        validation_alias=_env("NBL_SECRET_KEY"),
        description="Fernet key(s), comma-separated, that encrypt Hub tokens at "
        "rest; default: a key file $NBL_HOME/secret.key (mode 0600)",
    )
    load_check_timeout_s: float = Field(
        default=900,
        gt=0,
        validation_alias=_env("NBL_LOAD_CHECK_TIMEOUT"),
        description="how long a saved output may take to reload in a fresh process",
    )

    # --- leases --------------------------------------------------------------------------------
    lease_seconds: int = Field(default=120, ge=5, validation_alias=_env("NBL_LEASE_SECONDS"))

    # --- recovery (service/jobs/reconciler.py) ------------------------------------------------------
    max_attempts: int = Field(
        default=3,
        ge=1,
        validation_alias=_env("NBL_MAX_ATTEMPTS"),
        description="a job whose worker is lost this many times fails instead of running again",
    )
    reconcile_interval_s: float = Field(default=30.0, gt=0, validation_alias=_env("NBL_RECONCILE_INTERVAL"))
    redispatch_after_s: float = Field(
        default=600.0,
        gt=0,
        validation_alias=_env("NBL_REDISPATCH_AFTER"),
        description="re-send a queued job whose message went out this long ago (the "
        "broker may have lost it); a duplicate is dropped at delivery",
    )
    db_retry_s: float = Field(
        default=60.0,
        ge=0,
        validation_alias=_env("NBL_DB_RETRY_SECONDS"),
        description="how long a worker rides out a database outage before giving up an attempt",
    )
    hub_attempts: int = Field(
        default=4,
        ge=1,
        le=20,
        validation_alias=_env("NBL_HUB_ATTEMPTS"),
        description="tries of a Hub step (model config, download, dataset, publish) that fails "
        "with a 5xx, a timeout or a lost connection (worker/errors.py)",
    )
    hub_backoff_s: float = Field(
        default=5.0,
        ge=0,
        validation_alias=_env("NBL_HUB_BACKOFF"),
        description="the wait before the second try; it doubles after each",
    )

    # --- the API -------------------------------------------------------------------------------
    metrics_window_jobs: int = Field(
        default=500, ge=1, description="finished jobs whose stage durations /metrics summarizes"
    )
    trust_forwarded_proto: bool = Field(
        default=False,
        validation_alias=_env("NBL_TRUST_FORWARDED_PROTO"),
        description="behind a TLS proxy that sets X-Forwarded-Proto: the /ui login cookie is Secure when it says https",
    )

    @field_validator("class_prices")
    @classmethod
    def _prices(cls, value: str) -> str:
        from nbl.sizing.rates import parse_prices

        parse_prices(value)  # a bad price is told at start, not at the first estimate
        return value

    @field_validator("data_dir", "hf_token", mode="before")
    @classmethod
    def _unset_if_empty(cls, value):
        return None if isinstance(value, str) and not value.strip() else value  # NBL_DATA_DIR= means unset

    @field_validator("hf_hub_offline", mode="before")
    @classmethod
    def _hub_true(cls, value):
        # As huggingface_hub reads it (constants._is_true): 1, ON, YES, TRUE in any case; anything else is online
        return value.upper() in {"1", "ON", "YES", "TRUE"} if isinstance(value, str) else value

    @field_validator("hf_read_endpoint", mode="before")
    @classmethod
    def _hub_if_empty(cls, value):
        return HUB if isinstance(value, str) and not value.strip() else value  # HF_ENDPOINT= : the Hub

    @model_validator(mode="after")
    def _derive(self) -> "Settings":
        self.home = self.home.expanduser().resolve()
        if self.database_url is None:
            self.database_url = f"sqlite:///{self.home / 'nbl.db'}"
        for plain in ("postgres://", "postgresql://"):  # the driver we ship is psycopg 3
            if self.database_url.startswith(plain):
                self.database_url = "postgresql+psycopg://" + self.database_url[len(plain) :]
        if self.broker_url is None:
            self.broker_url = f"sqla+sqlite:///{self.home / 'broker.db'}"
        if self.wakeup_url is None and self.broker_url.startswith(("redis://", "rediss://")):
            self.wakeup_url = self.broker_url
        self.wakeup_url = self.wakeup_url or None  # empty: no wake-up
        self.models_dir = (self.models_dir or self.home / "models").expanduser().resolve()
        self.publish_dir = (self.publish_dir or self.home / "published").expanduser().resolve()
        self.stats_dir = (self.stats_dir or self.home / "stats").expanduser().resolve()
        self.data_dir = self.data_dir.expanduser() if self.data_dir else None
        if self.visibility_timeout_s is None:
            self.visibility_timeout_s = self.task_time_limit_s + 3600
        if self.task_soft_time_limit_s >= self.task_time_limit_s:
            raise ValueError("NBL_TASK_SOFT_TIME_LIMIT must be below NBL_TASK_TIME_LIMIT")
        from nbl.sizing.classes import parse_classes

        parse_classes(self.worker_classes)  # a bad NBL_WORKER_CLASSES fails here, at startup
        self.webhook_networks  # noqa: B018 - a bad NBL_WEBHOOK_ALLOWLIST entry fails here, at startup
        if self.visibility_timeout_s <= self.task_time_limit_s:
            raise ValueError(
                "NBL_VISIBILITY_TIMEOUT must exceed NBL_TASK_TIME_LIMIT, or a running task is re-delivered"
            )
        return self

    @property
    def spill_dir(self) -> Path:
        """Where hidden states past host_cache_bytes go: beside the statistics cache."""
        return self.stats_dir.parent / "spill"

    @property
    def database_is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def broker_scheme(self) -> str:
        return urlsplit(self.broker_url).scheme

    def ensure_dirs(self) -> None:
        """Create NBL_HOME and the directories under it (the SQLite files need their folder)."""
        for d in (self.home, self.models_dir, self.publish_dir, self.stats_dir):
            d.mkdir(parents=True, exist_ok=True)
