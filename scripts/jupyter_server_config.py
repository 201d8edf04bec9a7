# Serving Lab in JupyterLab's launcher without installing the project (README: "Inside JupyterLab"):
#   jupyter lab --config=/path/to/serving-lab/scripts/jupyter_server_config.py
# or copy these lines into ~/.jupyter/jupyter_server_config.py. Needs jupyter-server-proxy (requirements.txt).
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from jupyter_proxy import NAME, setup  # noqa: E402

c.ServerProxy.servers = {NAME: setup()}  # noqa: F821 - `c` is the config object Jupyter hands this file
