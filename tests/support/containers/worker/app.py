"""``/app/app.py`` in the worker container: pytest-celery's app module, here mainboard's own.

pytest-celery copies this file into the worker's volume and starts ``celery -A app worker``.
It replaces the line ``imports = None`` with one import per task module of the test; the
app itself is the one ``celery -A mainboard.tasks.app worker`` loads (hardened settings,
msgpack codec only, stage and integrate tasks included), its broker from
``$MAINBOARD_BROKER_URL``. Never imported on the test's side: it builds the app at import.
"""

from mainboard.tasks.app import get_app

imports = None

app = get_app()
