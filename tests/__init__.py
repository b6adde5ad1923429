"""remediate's tests: unit/ mirrors the package, actions/ one file per action family, integration/ and e2e/ apart."""

import pytest

# Before conftest imports anything of tests.support: the helpers' asserts explain themselves, as in test modules.
pytest.register_assert_rewrite("tests.support")
