# Sphinx configuration of the documentation (tox -e docs builds it, warnings
# as errors). The layout is OpenStack's: install/, admin/, configuration/,
# cli/, reference/, contributor/.
import configparser
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_exts"))
sys.path.insert(0, ROOT)

project = "vm-scheduler"
copyright = "the vm-scheduler authors"

extensions = [
    "openstackdocstheme",
    "oslo_config.sphinxext",
    "cli_help",
    "walkthrough",
    "module_map",
    "nova_options",
]

# openstackdocstheme: the repository the "report a bug" and source links name.
openstackdocs_repo_name = "vm-scheduler/vm-scheduler"
openstackdocs_use_storyboard = False
openstackdocs_bug_project = "vm-scheduler"
openstackdocs_bug_tag = "docs"
openstackdocs_auto_name = False

html_theme = "openstackdocs"
html_static_path = []
pygments_style = "native"
exclude_patterns = ["_exts"]
master_doc = "index"

# The version from setup.cfg (the project does not use pbr, so the theme
# cannot find it by itself).
openstackdocs_auto_version = False
_metadata = configparser.ConfigParser()
_metadata.read(os.path.join(ROOT, "setup.cfg"))
version = release = _metadata["metadata"]["version"]
