"""Where memagent keeps things: every path under MEMAGENT_HOME (or the user's data and config
directories) is named here, so no layer has to ask another where its files are."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def default_home() -> Path:
    """Where memagent keeps its data: $MEMAGENT_HOME when set, else the user data directory."""
    home = os.environ.get("MEMAGENT_HOME")
    return Path(home).expanduser() if home else Path(platformdirs.user_data_dir("memagent"))


def traces_db() -> Path:
    return default_home() / "traces.db"


def models_dir() -> Path:
    return default_home() / "models"


def config_file() -> Path:
    """config.toml: under MEMAGENT_HOME when set (one folder for everything), else the user config directory."""
    home = os.environ.get("MEMAGENT_HOME")
    if home:
        return Path(home).expanduser() / "config.toml"
    return Path(platformdirs.user_config_dir("memagent")) / "config.toml"
