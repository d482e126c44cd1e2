#!/bin/sh
# Fetches the console's wheels for a GPU machine that cannot reach a package index
# (Python 3.12, x86_64) into .device-wheels/, so that machine installs the console with
#   python3 -m pip install --no-index --find-links .device-wheels --no-build-isolation -e .
set -eu
dest=${1:-.device-wheels}
py=${DEVICE_PYTHON_VERSION:-3.12}
mkdir -p "$dest"
python3 -m pip download --quiet --python-version "$py" --implementation cp --only-binary=:all: \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$dest" \
    "textual>=8.2,<9" "asyncssh>=2.14" "paramiko>=3.4" "pydantic>=2.6" "platformdirs>=4.0" \
    nvidia-ml-py py-spy==0.4.3
# python-hostlist ships as a source archive only: build its (pure Python) wheel here.
python3 -m pip wheel --quiet --no-deps -w "$dest" "python-hostlist>=1.23"
