"""The README, the documentation site and the release files say what is true and stay current.

``mkdocs build --strict`` (run by ``scripts/test``) checks the site's links and anchors; these
tests check what it cannot: generated pages are current, every setting and message is on its
page, every page is in the navigation, the README is short and leads with the two commands, and
the version is written once.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

import lineup_plugin
from lineup_plugin.cli import main
from lineup_plugin.config.settings import Settings, WuKongIMSettings
from lineup_plugin.docs_gen import BEGIN, DOCS_DIR, END, stale_pages, type_of, write
from lineup_plugin.docs_gen import main as docs_gen
from lineup_plugin.protocol import KINDS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: Markdown links and images with a relative target: [text](target) or ![alt](target)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
#: ``pip install lineup-plugin`` (with extras, quoted or not) from an index: not followed by ``@ <url>``
INDEX_INSTALL = re.compile(r"pip install [\"']?lineup-plugin(?>\[[a-z,]+\])?(?![\w\[-])(?![\"']?\s*@)")


def test_generated_pages_are_not_stale() -> None:
    assert stale_pages() == [], "run: python -m lineup_plugin.docs_gen"


def test_the_check_command_passes_on_the_committed_pages(capsys: pytest.CaptureFixture[str]) -> None:
    assert docs_gen(["--check"]) == 0
    assert capsys.readouterr().err == ""


def test_the_stale_check_notices_a_changed_region_and_a_missing_one(tmp_path: Path) -> None:
    for page in ("settings.md", "protocol.md"):
        shutil.copy(DOCS_DIR / page, tmp_path / page)
    settings = tmp_path / "settings.md"
    settings.write_text(settings.read_text().replace("`LINEUP_PORT`", "`LINEUP_PORTE`"))
    protocol = tmp_path / "protocol.md"
    protocol.write_text(protocol.read_text().replace(END.format(name="messages"), ""))
    stale = stale_pages(tmp_path)
    assert stale[0] == "settings.md"
    assert stale[1].startswith("protocol.md: no generated region; add the lines ")
    assert write(tmp_path) == stale[1:], "a page without its region is left alone and named"
    assert "`LINEUP_PORT`" in settings.read_text() and stale_pages(tmp_path) == stale[1:]


def test_text_outside_the_generated_region_is_kept(tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    begin, end = BEGIN.format(name="settings"), END.format(name="settings")
    page.write_text(f"# Settings\n\nWritten by hand.\n\n{begin}\nold\n{end}\n\nAfter.\n")
    shutil.copy(DOCS_DIR / "protocol.md", tmp_path / "protocol.md")
    assert write(tmp_path) == []
    text = page.read_text()
    assert text.startswith("# Settings\n\nWritten by hand.\n\n" + begin) and text.endswith(end + "\n\nAfter.\n")
    assert "old" not in text and "| `port` | `LINEUP_PORT` |" in text


def test_every_setting_has_a_description_and_a_row_with_its_variable() -> None:
    page = (DOCS_DIR / "settings.md").read_text()
    for model, prefix in ((Settings, ""), (WuKongIMSettings, "wukongim.")):
        for name, field in model.model_fields.items():
            assert field.description, f"setting {prefix}{name} has no description (Field(description=...))"
            variable = "LINEUP_" + (prefix + name).replace(".", "_").upper()
            assert f"| `{prefix}{name}` | `{variable}` |" in page


def test_every_wire_message_has_its_section() -> None:
    page = (DOCS_DIR / "protocol.md").read_text()
    for kind in KINDS:
        assert re.search(rf"^### {re.escape(kind)} \{{#", page, re.MULTILINE), f"no section for {kind}"


@pytest.mark.parametrize(
    ("schema", "shown"),
    [
        ({"type": "string", "minLength": 1, "maxLength": 200}, "string (1–200 chars)"),
        ({"type": "integer", "minimum": 0, "maximum": 9007199254740991}, "integer ≥ 0 and ≤ 9,007,199,254,740,991"),
        ({"anyOf": [{"$ref": "#/$defs/Origin"}, {"type": "null"}]}, "[Origin](#def-origin) or null"),
        ({"type": "array", "items": {"type": "string"}, "maxItems": 1000}, "array of string, at most 1,000"),
        ({"enum": ["a", "b"]}, '`"a"` or `"b"`'),
        ({"type": "string", "format": "lineup.v1.<kind>"}, "string (lineup.v1.&lt;kind&gt;)"),
    ],
)
def test_schema_types_read_as_short_text(schema: dict[str, object], shown: str) -> None:
    assert type_of(schema) == shown


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [page for item in nav for page in pages(item)]
        if isinstance(nav, dict):
            return [page for value in nav.values() for page in pages(value)]
        return []

    listed = pages(config["nav"])
    assert len(listed) == len(set(listed)), "a page is listed twice"
    assert sorted(listed) == sorted(p.name for p in DOCS_DIR.glob("*.md"))


def test_the_readme_is_short_and_leads_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move the detail into docs/"
    block = lines.index("```bash")
    assert block < 10, "the two commands come first"
    assert [line.split()[0] for line in lines[block + 1 : block + 3]] == ["scripts/demo", "scripts/test"]


@pytest.mark.parametrize("document", ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "examples/hermes/README.md"])
def test_relative_links_of_the_repository_documents_reach_a_file(document: str) -> None:
    path = ROOT / document
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:|#", target):
            continue
        assert (path.parent / target.split("#")[0]).exists(), f"{document} links to {target}, which does not exist"


def test_no_document_tells_users_to_install_from_an_index_that_does_not_serve_lineup() -> None:
    documents = [README, ROOT / "examples/hermes/README.md", *DOCS_DIR.glob("*.md")]
    for path in documents:
        for line in path.read_text().splitlines():
            assert not INDEX_INSTALL.search(line), f"{path.relative_to(ROOT)}: {line.strip()}"


def test_the_version_is_written_once_and_lineup_version_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lineup_plugin.__version__"}
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"lineup {lineup_plugin.__version__}\n"


def test_the_changelog_has_an_unreleased_section_and_one_for_this_version() -> None:
    headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert lineup_plugin.__version__ in headings


def test_versions_quoted_in_install_steps_are_this_version() -> None:
    """The wheel's file name and ``hermes plugins list``'s line, as the README and the docs quote them."""
    quoted = re.compile(r"lineup_plugin-(\d+\.\d+\.\d+\w*)|entrypoint\s+(\d+\.\d+\.\d+\w*)")
    for path in [README, *DOCS_DIR.glob("*.md")]:
        for match in quoted.finditer(path.read_text()):
            version = match.group(1) or match.group(2)
            assert version == lineup_plugin.__version__, f"{path.name} quotes version {version}: {match.group(0)}"
