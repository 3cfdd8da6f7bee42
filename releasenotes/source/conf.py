# Sphinx configuration of the release notes (reno; tox -e docs builds them).
import configparser
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

project = "vm-scheduler release notes"
copyright = "the vm-scheduler authors"

extensions = [
    "openstackdocstheme",
    "reno.sphinxext",
]

openstackdocs_repo_name = "vm-scheduler/vm-scheduler"
openstackdocs_use_storyboard = False
openstackdocs_bug_project = "vm-scheduler"
openstackdocs_bug_tag = "releasenotes"
openstackdocs_auto_name = False
openstackdocs_auto_version = False

_metadata = configparser.ConfigParser()
_metadata.read(os.path.join(ROOT, "setup.cfg"))
version = release = _metadata["metadata"]["version"]

html_theme = "openstackdocs"
html_static_path = []
master_doc = "index"
