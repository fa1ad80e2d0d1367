"""Reading the MATLAB struct arrays of the Stanford Cars annotation files."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def mat_variable(path: Path, name: str, dataset: str) -> np.ndarray:
    """Variable `name` of a .mat file as a 1-D array (struct arrays keep their fields)."""
    from scipy.io import loadmat
    from scipy.io.matlab import MatReadError

    try:
        variables = loadmat(path, squeeze_me=True)
    except (MatReadError, ValueError, OSError) as error:
        raise ValueError(
            f"{dataset}: cannot read {path} as a MATLAB file ({error}); download it again"
        ) from error
    if name not in variables:
        found = sorted(k for k in variables if not k.startswith("__"))
        raise ValueError(
            f"{dataset}: {path} holds no variable {name!r} (it holds {found}); "
            "is it the right annotation file?"
        )
    return np.atleast_1d(variables[name])


def struct_field(records: np.ndarray, field: str, path: Path, dataset: str) -> list:
    """One field of a struct array as a list of Python scalars or strings."""
    if records.dtype.names is None or field not in records.dtype.names:
        raise ValueError(
            f"{dataset}: the annotations in {path} have no field {field!r} "
            f"(fields: {records.dtype.names}); is it the right annotation file?"
        )
    return [
        value.item() if isinstance(value, np.ndarray | np.generic) else value
        for value in records[field]
    ]


def number_field(records: np.ndarray, field: str, path: Path, dataset: str) -> list[int]:
    """One whole-number field (a class id) of a struct array; any other value is named."""
    values = struct_field(records, field, path, dataset)
    numbers = []
    for entry, value in enumerate(values, start=1):
        whole = isinstance(value, int | float) and not isinstance(value, bool)
        if not (whole and float(value).is_integer()):
            raise ValueError(
                f"{dataset}: {path} entry {entry} of the annotations has {field}={value!r}, not a "
                "whole number; the file is damaged, download it again"
            )
        numbers.append(int(value))
    return numbers
