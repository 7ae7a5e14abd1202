#!/usr/bin/env python3
"""Writes kargo-geo.mmdb, the small MaxMind database of the DNS examples and tests: four /16s of
10.0.0.0/8 with a country, a continent and an autonomous system number each, in the fields of
GeoIP2/GeoLite2 Country and ASN databases. Needs the mmdb-writer package (pip install
mmdb-writer). Usage: make-geo.py [OUTPUT] [NETWORK=COUNTRY,CONTINENT,ASN ...]"""
import sys

from mmdb_writer import MMDBWriter, MmdbU32
from netaddr import IPSet

PLACES = {
    "10.1.0.0/16": ("TR", "EU", 64501),
    "10.2.0.0/16": ("DE", "EU", 64502),
    "10.3.0.0/16": ("US", "NA", 64503),
    "10.4.0.0/16": ("JP", "AS", 64504),
}

output = sys.argv[1] if len(sys.argv) > 1 else "kargo-geo.mmdb"
for change in sys.argv[2:]:
    network, place = change.split("=")
    country, continent, asn = place.split(",")
    PLACES[network] = (country, continent, int(asn))
writer = MMDBWriter(ip_version=6, ipv4_compatible=True, database_type="trafik-kargo-geo")
for network, (country, continent, asn) in PLACES.items():
    writer.insert_network(
        IPSet([network]),
        {
            "country": {"iso_code": country},
            "continent": {"code": continent},
            "autonomous_system_number": MmdbU32(asn),  # 32 bits, as in MaxMind's ASN databases
        },
    )
writer.to_db_file(output)
