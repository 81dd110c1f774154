"""Every way nova-imgtype steers stock Nova's code, one adapter each.

The plugin changes what stock's own methods do without copying them: it
hands stock a guest whose ``migrate`` rewrites the destination XML, a disk
config that writes ``<disk type='volume'>``, a remote filesystem for the
length of a cold move, and so on. Each such hook is a module here, and
each relies on facts about stock's source (that stock calls a step, and
in what order) that no signature shows: a module names them in its
``FACTS`` (:class:`~nova_imgtype.stock.facts.SourceFact`), and
``tests/unit/test_stock_facts.py`` checks every one against the installed
Nova, so that a Nova release that moves a step fails a test instead of
misbehaving in a cloud.

What the plugin reads of stock's signatures is listed in
:mod:`nova_imgtype.compat`; the private stock names it touches in
``tests/unit/test_stock_private_names.py``.
"""
