"""nova-imgtype: image-format aware libvirt storage for stock Nova."""
