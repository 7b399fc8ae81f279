"""The currencies an order may be in: ISO 4217 codes (from pycountry's copy of the
standard), without the codes that name no money one pays with: precious metals, bond-market
units, special drawing rights and other accounting units, the testing code and "no currency"."""

from __future__ import annotations

import pycountry

NOT_MONEY = frozenset({"XAG", "XAU", "XPD", "XPT", "XBA", "XBB", "XBC", "XBD", "XDR", "XSU", "XUA", "XTS", "XXX"})
ISO_4217 = frozenset(c.alpha_3 for c in pycountry.currencies) - NOT_MONEY
