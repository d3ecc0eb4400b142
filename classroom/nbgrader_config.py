"""nbgrader on a class server: every user's nbgrader (servers, terminals, the instructor's
commands) reads this file from the class's environment (``etc/jupyter/``), where
scripts/classroom.sh puts it with the exchange's path appended.

- The exchange's folders are root's, made by scripts/classroom.sh: ``groupshared`` tells
  nbgrader not to insist on owning them (nor on a world-writable exchange root) and lets
  the instructors' group write the course's folders.
- A student's submission and feedback are theirs alone (``mpilab.autograder.exchange``).
"""

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

c.CourseDirectory.groupshared = True
c.ExchangeFactory.submit = "mpilab.autograder.exchange.PrivateSubmit"
c.ExchangeFactory.release_feedback = "mpilab.autograder.exchange.PrivateReleaseFeedback"
# appended by scripts/classroom.sh: c.CourseDirectory.course_id, and c.Exchange.root as
# $MPILAB_EXCHANGE (the hub sets it for every user's server) or else the class's exchange
