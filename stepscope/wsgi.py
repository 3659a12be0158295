import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")
application = get_wsgi_application()

# Every view and serializer loaded, then all of it moved out of the garbage collector's
# reach: a request never makes garbage of them, and a full collection that walked them
# (some 150,000 objects) took 80-90 ms, one request in five of a large push.
get_resolver().url_patterns  # noqa: B018  (imports every app's URLconf and views)
gc.collect()
gc.freeze()
