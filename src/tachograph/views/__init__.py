"""What people read: rendering helpers that do not need rich (see :mod:`tachograph.views.text`)."""
