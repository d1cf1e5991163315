"""The push services subscriptions may name by default (kept apart: the settings read it at start)."""

#: the push services of the browsers (a host, or a domain whose hosts are all taken): Chrome and
#: Android, Firefox, Safari, Edge on Windows. The ``push_services`` setting replaces the list
PUSH_SERVICES = (
    "fcm.googleapis.com",
    "android.googleapis.com",
    "push.services.mozilla.com",
    "push.apple.com",
    "notify.windows.com",
)
