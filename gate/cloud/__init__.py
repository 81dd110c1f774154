"""A real OpenStack on one machine for the gate (``python -m gate.cloud``).

``up`` starts, as root, under one temporary directory and on loopback only:
MariaDB, RabbitMQ, keystone, placement, glance and nova-api (uwsgi),
nova-conductor, nova-scheduler (with nova-imgtype's request filter), a
network endpoint stub, and two nova-computes on ``imgtype.LibvirtDriver``,
each in its own mount + UTS namespace with its own libvirtd, virtlogd, sshd
and ``instances_path``. ``down`` stops all of it and removes the directory;
``computes --driver stock|plugin`` switches both computes' driver.
"""
