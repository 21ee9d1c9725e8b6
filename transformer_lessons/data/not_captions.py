"""Sentences that are not image captions: what a caption translator meets outside its world.

Multi30k's sentences all describe a photograph ("Ein Mann fährt Fahrrad."). These were written for the
course (none is in any Multi30k split; a test checks it), to measure how well a signal of the
translator's own tells a sentence unlike its training captions (:mod:`transformer_lessons.confidence`):
questions, instructions, news, science and abstract statements, everyday first-person talk, and English
typed where German was expected.
"""

from __future__ import annotations

NOT_CAPTIONS: dict[str, tuple[str, ...]] = {
    "questions": (
        "Wo ist der nächste Bahnhof?",
        "Wie spät ist es jetzt?",
        "Kannst du mir bitte das Salz reichen?",
        "Warum hast du gestern nicht angerufen?",
        "Wie viel kostet eine Fahrkarte nach Berlin?",
        "Hast du deine Hausaufgaben schon gemacht?",
        "Welche Sprachen sprichst du außer Deutsch?",
        "Wann beginnt die Besprechung morgen früh?",
        "Ist dieser Platz noch frei?",
        "Was hältst du von dem neuen Gesetz?",
        "Könnten Sie mir den Weg zum Rathaus erklären?",
        "Wer hat den Schlüssel zuletzt gehabt?",
        "Darf ich hier mit Karte bezahlen?",
        "Woran arbeitest du gerade?",
        "Wie lange dauert der Flug nach Madrid?",
    ),
    "instructions": (
        "Schalten Sie das Gerät vor der Reinigung aus.",
        "Drücken Sie die Taste drei Sekunden lang.",
        "Bitte schließen Sie die Tür leise.",
        "Geben Sie Ihr Passwort zweimal ein.",
        "Lassen Sie den Teig eine Stunde ruhen.",
        "Rühren Sie die Soße gelegentlich um.",
        "Bewahren Sie das Medikament außerhalb der Reichweite von Kindern auf.",
        "Speichern Sie die Datei, bevor Sie das Programm beenden.",
        "Melden Sie sich bitte am Empfang an.",
        "Nehmen Sie zwei Tabletten nach dem Essen.",
        "Ziehen Sie den Stecker, wenn das Gerät überhitzt.",
        "Füllen Sie das Formular vollständig aus.",
    ),
    "news": (
        "Die Regierung hat gestern neue Steuergesetze beschlossen.",
        "Die Inflation ist im vergangenen Quartal leicht gesunken.",
        "Der Bundestag debattiert über die Reform der Rente.",
        "Die Aktienkurse fielen nach der Ankündigung der Zentralbank.",
        "Der Minister trat nach monatelanger Kritik zurück.",
        "Die Gewerkschaft fordert höhere Löhne für Pflegekräfte.",
        "Das Unternehmen meldet einen Rekordgewinn im dritten Quartal.",
        "Die Wahlbeteiligung lag bei knapp siebzig Prozent.",
        "Nach dem Unwetter bleiben mehrere Schulen geschlossen.",
        "Der Prozess gegen den ehemaligen Bürgermeister beginnt im Mai.",
        "Die Verhandlungen über das Handelsabkommen sind gescheitert.",
        "Forscher haben einen neuen Impfstoff gegen Malaria getestet.",
        "Die Arbeitslosigkeit erreichte den niedrigsten Stand seit Jahren.",
        "Die Stadt plant eine neue Straßenbahnlinie bis zum Flughafen.",
    ),
    "science and ideas": (
        "Die Quantenmechanik beschreibt das Verhalten kleinster Teilchen.",
        "Der Algorithmus sortiert die Liste in logarithmischer Zeit.",
        "Entropie ist ein Maß für die Unordnung eines Systems.",
        "Die Hypothese konnte experimentell nicht bestätigt werden.",
        "Photosynthese wandelt Lichtenergie in chemische Energie um.",
        "Das Integral dieser Funktion divergiert.",
        "Freiheit bedeutet Verantwortung für die eigenen Entscheidungen.",
        "Die Datenbank wird jede Nacht automatisch gesichert.",
        "Ein Compiler übersetzt Quellcode in Maschinensprache.",
        "Die Relativitätstheorie verknüpft Raum und Zeit.",
    ),
    "everyday talk": (
        "Ich habe keine Lust, heute zu kochen.",
        "Meiner Meinung nach war der Film zu lang.",
        "Wir sollten uns nächste Woche wieder treffen.",
        "Es tut mir leid, dass ich zu spät bin.",
        "Ich glaube, das Wetter wird morgen besser.",
        "Mein Bruder zieht nächsten Monat nach Hamburg.",
        "Du hast völlig recht, das war ein Fehler.",
        "Ich verstehe nicht, was du meinst.",
    ),
    "English": (
        "Where is the nearest train station?",
        "The meeting has been moved to next Thursday.",
        "Please restart your computer to finish the update.",
        "I think we should leave before it starts raining.",
        "The committee approved the budget for next year.",
        "Can you send me the report by Friday?",
        "This sentence is written in English, not German.",
        "My sister bought a new bicycle last week.",
    ),
}


def not_captions() -> list[str]:
    """Every sentence of :data:`NOT_CAPTIONS`, kind by kind (67 of them)."""
    return [sentence for sentences in NOT_CAPTIONS.values() for sentence in sentences]


__all__ = ["NOT_CAPTIONS", "not_captions"]
