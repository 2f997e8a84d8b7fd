"""Parses a PROV-O export with rdflib (Turtle or JSON-LD, by file extension) and prints
what it holds as JSON: counts of PROV classes and the prov:used / prov:wasGeneratedBy
pairs. Used by the e2e suite to prove the export is standard RDF."""

import json
import sys

import rdflib

PROV = rdflib.Namespace("http://www.w3.org/ns/prov#")


def main() -> None:
    path = sys.argv[1]
    fmt = "json-ld" if path.endswith(".jsonld") else "turtle"
    g = rdflib.Graph()
    g.parse(path, format=fmt)
    count = lambda cls: len(set(g.subjects(rdflib.RDF.type, cls)))
    print(
        json.dumps(
            {
                "triples": len(g),
                "activities": count(PROV.Activity),
                "entities": count(PROV.Entity),
                "agents": count(PROV.Agent),
                "used": sorted([str(a), str(e)] for a, e in g.subject_objects(PROV.used)),
                "generated": sorted([str(e), str(a)] for e, a in g.subject_objects(PROV.wasGeneratedBy)),
                "started": {str(a): str(t) for a, t in g.subject_objects(PROV.startedAtTime)},
            }
        )
    )


if __name__ == "__main__":
    main()
