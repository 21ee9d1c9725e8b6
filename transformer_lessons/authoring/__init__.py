"""The course authors' tools: they write the notebooks; a learner never needs them.

* :mod:`~transformer_lessons.authoring.colab` stamps Google Colab support into
  every notebook: an "Open in Colab" badge, a setup cell that installs the course
  package on Colab (and does nothing elsewhere), and figure links that resolve there.
* :mod:`~transformer_lessons.authoring.build_learner` builds the learner versions
  in ``learner/`` from the solution notebooks in ``notebooks/``: each exercise
  becomes a stub that raises ``NotImplementedError``, its solution folded below it.

Both run from the repository root, and ``make learner`` runs them in that order::

    python -m transformer_lessons.authoring.colab
    python -m transformer_lessons.authoring.build_learner

Add ``--check`` to either to write nothing and exit 1 when something is out of date
(``make learner-test``). Nothing here is imported by ``import transformer_lessons``.
"""
