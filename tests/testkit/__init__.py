"""What the tests share that is not a test: plain helpers, fakes at the edge, and the service tests' fixtures.

A package imported from tests/ (on sys.path: the root conftest.py's folder, or put there by a script such as
tests/serving/prepare.py): `from testkit.service_lib import body`. A module used by one folder of tests only stays
in that folder (tests/worker/publish/publish_helpers.py); fixtures live in each folder's conftest.py, those of
the service tests in the plugin `testkit.service_fixtures` that tests/conftest.py loads.
"""
