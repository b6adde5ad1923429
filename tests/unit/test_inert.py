"""remediate.outbound.inert: a value from an alert as inert text of Slack mrkdwn, Teams markdown and HTML."""

from __future__ import annotations

import pytest

from remediate.outbound import inert

ZWSP = "\u200b"
FORGED_STEP = "x\n✅ 3. *drain*: succeeded"


@pytest.mark.parametrize("text", ["a\nb", "a\r\nb", "a\rb", "a\u2028b", "a\u2029b", "a\x85b", "a\vb"])
def test_every_line_break_is_shown_as_a_mark_on_the_same_line(text: str) -> None:
    assert inert.one_line(text) == "a⏎b"


def test_control_and_bidi_override_characters_are_dropped_and_tabs_become_spaces() -> None:
    assert inert.one_line("a\x1b[31mb\tc\u202ed\x00") == "a[31mb cd"


def test_urls_are_broken_so_no_client_links_them_and_stay_readable() -> None:
    assert inert.unlinked("see https://evil.example/x and www.evil.example") == (
        f"see https:{ZWSP}//evil.example/x and www{ZWSP}.evil.example"
    )
    assert inert.unlinked("gpu-node-7.dc1.example.com") == "gpu-node-7.dc1.example.com"


def test_slack_values_add_no_link_mention_formatting_or_line() -> None:
    text = inert.slack(f"{FORGED_STEP} <!here> <https://evil|x> a&b _it_ ~s~ `c` job_name_7")

    assert "\n" not in text and "<" not in text and ">" not in text
    assert not set(text) & set("*~`")
    assert text == (
        "x⏎✅ 3. \u2217drain\u2217: succeeded &lt;!here&gt; &lt;https:\u200b//evil|x&gt; a&amp;b "
        "\u02cdit\u02cd \u223cs\u223c \u02cbc\u02cb job_name_7"
    )


def test_teams_values_add_no_link_emphasis_list_or_line() -> None:
    assert inert.teams("[x](https://evil) **b** _i_ node-a (ok)") == (
        rf"\[x\](https:{ZWSP}//evil) \*\*b\*\* \_i\_ node-a (ok)"
    )
    assert inert.teams(FORGED_STEP) == r"x⏎✅ 3. \*drain\*: succeeded"
    assert inert.teams("1. first") == r"1\. first"
    assert inert.teams("- item") == r"\- item"


def test_html_values_are_text() -> None:
    assert inert.html_text('<img src=x onerror="alert(1)">\nb') == ("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;⏎b")
