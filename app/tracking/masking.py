"""Secrets kept out of MLflow: a URL's password (a fleet's database URL) and the value of a setting
named like a password or token, masked before a param, tag or error message is logged."""
from __future__ import annotations

import re
from typing import Any

from mlflow.entities import Param

# scheme://user:PASSWORD@host: the password of a database or server URL (a fleet's PostgreSQL)
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)[^@\s/]+(?=@)")
_SECRET_KEY = re.compile(r"(password|passwd|secret|token|api_key)$", re.IGNORECASE)


def mask_secrets(text: str) -> str:
    """`text` with every password in a URL replaced by ***."""
    return _URL_PASSWORD.sub(r"\g<head>***", text)


def masked_params(flat: dict[str, Any]) -> list[Param]:
    """MLflow params of flattened settings: values cut to MLflow's limit, secrets masked (a URL's
    password, the value of a key named like a password or token)."""
    return [Param(k, "***" if _SECRET_KEY.search(k.rsplit(".", 1)[-1]) and v else mask_secrets(str(v))[:6000])
            for k, v in flat.items()]
