! wave_common.f90 - what the MPI and the Coarray Fortran wave programs share.
!
! Purpose: the problem of mpilab.halo.serial_wave (2D acoustic wave, split pressure
! p = px + py, Virieux staggered grid, Ricker source, rigid walls), its decomposition and
! the programs' command line, so that wave_mpif.f90 and wave_caf.f90 differ only in how
! ghost cells travel.
! Algorithm: the update loops do the floating-point operations of serial_wave in its
! order, point by point (no fused multiply-add: build with -ffp-contract=off, never
! -ffast-math), so the parallel field equals the NumPy one bit for bit.
!
! Layout: one array f(0:ld-1, 0:*, 4) per process, x fastest (so f(:, y, k) is a row of
! the C kernel's row-major field), fields k = 1 px, 2 py, 3 vx, 4 vy; the interior is
! f(1:cols, 1:rows, k), the rest is the one-cell ghost frame.
!
! Command line (key=value, any order):
!   nx, ny       - cells along x (columns) and y (rows)
!   steps        - steps from rest before the field is written (>= 0)
!   mode         - exchange, named by each program
!   f0, courant  - Ricker central frequency (t0 = 1/f0) and dt = courant (<= 1/sqrt 2)
!   sx, sy       - source cell (default nx/2, ny/2)
!   py, px       - process grid (default: as MPI_Dims_create for 2 dimensions)
!   warmup, iters, reps, min_time - after the field is written, `reps` repetitions of
!                  `iters` timed steps (iters = 0: calibrated so one lasts min_time s,
!                  warmup < 0: min(iters, 10) untimed steps first)
!   out          - path prefix: out.field (the (ny, nx) pressure, raw float64, x fastest)
!                  and out.times (text: settings, then seconds per step per repetition)
!   ftz          - 1 (default): flush denormals to zero, as the C kernel does
!   debug        - test hooks only: hang (the last process sleeps forever), crash (it
!                  stops with an error) at the first step
module wave_common
  use, intrinsic :: iso_fortran_env, only: dp => real64, int64, error_unit
  use, intrinsic :: iso_c_binding, only: c_double
  implicit none
  private
  public :: dp, int64, error_unit, wave_args, parse_args, check_args, split, ricker
  public :: vx_cols, vy_rows, px_cols, py_rows, set_ftz, write_field, write_times
  public :: time_steps, wtime

  real(dp), parameter :: pi = 3.141592653589793_dp
  ! barriers whose exit skew time_steps measures after the timed repetitions
  integer, parameter, public :: SKEW_REPS = 31

  abstract interface
    subroutine step_fn()
    end subroutine step_fn
    subroutine barrier_fn()
    end subroutine barrier_fn
    subroutine max_fn(t)
      import :: dp
      real(dp), intent(inout) :: t
    end subroutine max_fn
  end interface

  ! MPI_Wtime, the clock of the C kernels, in both programs (libmpi is linked in either)
  interface
    function wtime() bind(c, name='MPI_Wtime')
      import :: c_double
      real(c_double) :: wtime
    end function wtime
  end interface

  type :: wave_args
    integer :: nx = -1, ny = -1, steps = 0, sx = -1, sy = -1, dims(2) = 0
    integer :: warmup = -1, iters = 0, reps = 0
    real(dp) :: f0 = 0.05_dp, courant = 0.5_dp, min_time = 0.01_dp
    character(len=32) :: mode = ''
    character(len=16) :: debug = ''
    character(len=:), allocatable :: out
    logical :: ftz = .true.
  end type wave_args

contains

  ! Read key=value arguments; msg is empty when all were understood.
  subroutine parse_args(a, msg)
    type(wave_args), intent(out) :: a
    character(len=:), allocatable, intent(out) :: msg
    character(len=4096) :: arg
    character(len=:), allocatable :: key, val
    integer :: i, eq, ios, ftz

    msg = ''
    a%out = ''
    ftz = 1
    do i = 1, command_argument_count()
      call get_command_argument(i, arg)
      eq = index(arg, '=')
      if (eq < 2) then
        msg = 'arguments are key=value, got "' // trim(arg) // '"'
        return
      end if
      key = arg(:eq - 1)
      val = trim(arg(eq + 1:))
      ios = 0
      select case (key)
      case ('nx');       read (val, *, iostat=ios) a%nx
      case ('ny');       read (val, *, iostat=ios) a%ny
      case ('steps');    read (val, *, iostat=ios) a%steps
      case ('sx');       read (val, *, iostat=ios) a%sx
      case ('sy');       read (val, *, iostat=ios) a%sy
      case ('py');       read (val, *, iostat=ios) a%dims(1)
      case ('px');       read (val, *, iostat=ios) a%dims(2)
      case ('warmup');   read (val, *, iostat=ios) a%warmup
      case ('iters');    read (val, *, iostat=ios) a%iters
      case ('reps');     read (val, *, iostat=ios) a%reps
      case ('f0');       read (val, *, iostat=ios) a%f0
      case ('courant');  read (val, *, iostat=ios) a%courant
      case ('min_time'); read (val, *, iostat=ios) a%min_time
      case ('ftz');      read (val, *, iostat=ios) ftz
      case ('mode');     a%mode = val
      case ('debug');    a%debug = val
      case ('out');      a%out = val
      case default
        msg = 'unknown argument "' // key // '"'
        return
      end select
      if (ios /= 0 .or. len(val) == 0) then
        msg = 'bad value for ' // key // ': "' // val // '"'
        return
      end if
    end do
    a%ftz = ftz /= 0
  end subroutine parse_args

  ! Check the arguments against the number of processes and the program's modes; fill
  ! in the default source and process grid. msg is empty when all is well.
  subroutine check_args(a, nproc, modes, msg)
    type(wave_args), intent(inout) :: a
    integer, intent(in) :: nproc
    character(len=*), intent(in) :: modes(:)
    character(len=:), allocatable, intent(out) :: msg
    character(len=64) :: buf
    integer :: i

    msg = ''
    if (a%nx < 1 .or. a%ny < 1) then
      msg = 'nx and ny must be >= 1'
    else if (a%steps < 0) then
      msg = 'steps must be >= 0'
    else if (.not. (a%f0 > 0 .and. a%f0 <= huge(a%f0))) then
      msg = 'f0 must be finite and > 0'
    else if (.not. (a%courant > 0 .and. a%courant <= 1.0_dp / sqrt(2.0_dp))) then
      msg = 'courant must be in (0, 1/sqrt(2)]'
    else if (a%reps < 0 .or. a%iters < 0) then
      msg = 'reps and iters must be >= 0'
    else if (.not. (a%min_time > 0)) then
      msg = 'min_time must be > 0'
    end if
    if (len(msg) > 0) return
    if (a%sx < 0) a%sx = a%nx / 2
    if (a%sy < 0) a%sy = a%ny / 2
    if (a%sx >= a%nx .or. a%sy >= a%ny) then
      msg = 'source outside the grid'
      return
    end if
    if (all(a%dims == 0)) call dims_create(nproc, a%dims)
    if (a%dims(1) < 1 .or. a%dims(2) < 1 .or. a%dims(1) * a%dims(2) /= nproc) then
      write (buf, '(a, i0, a, i0, a, i0)') 'py * px = ', a%dims(1), ' * ', a%dims(2), &
        ' is not the process count ', nproc
      msg = trim(buf)
      return
    end if
    if (a%dims(1) > a%ny .or. a%dims(2) > a%nx) then
      msg = 'every process needs at least one cell per axis (py <= ny, px <= nx)'
      return
    end if
    do i = 1, size(modes)
      if (trim(a%mode) == trim(modes(i))) return
    end do
    msg = 'unknown mode "' // trim(a%mode) // '"'
  end subroutine check_args

  ! MPI_Dims_create(n, 2) for the counts this course uses: py >= px, as square as can be.
  subroutine dims_create(n, dims)
    integer, intent(in) :: n
    integer, intent(out) :: dims(2)
    integer :: p

    dims = [n, 1]
    do p = 1, n
      if (p * p > n) exit
      if (mod(n, p) == 0) dims = [n / p, p]
    end do
  end subroutine dims_create

  ! Part c (0-based) of n points over `parts`: first (0-based) and count; the first
  ! mod(n, parts) parts get one more, as mpilab.halo.split.
  pure subroutine split(n, parts, c, first, count)
    integer, intent(in) :: n, parts, c
    integer, intent(out) :: first, count
    integer :: base, extra

    base = n / parts
    extra = mod(n, parts)
    first = c * base + min(c, extra)
    count = base
    if (c < extra) count = base + 1
  end subroutine split

  ! Ricker wavelet, in mpilab.halo.ricker's order of operations.
  real(dp) function ricker(t, f0)
    real(dp), intent(in) :: t, f0
    real(dp) :: q, a

    q = (pi * f0) * (t - 1.0_dp / f0)
    a = q * q
    ricker = (1.0_dp - 2.0_dp * a) * exp(-a)
  end function ricker

  ! vx -= dt * (p(x + 1) - p(x)), p = px + py, for columns c0..c1 of rows 1..rows
  subroutine vx_cols(px, py, vx, dt, c0, c1, rows)
    real(dp), intent(in), contiguous :: px(0:, 0:), py(0:, 0:)
    real(dp), intent(inout), contiguous :: vx(0:, 0:)
    real(dp), intent(in) :: dt
    integer, intent(in) :: c0, c1, rows
    integer :: i, j

    do j = 1, rows
      do i = c0, c1
        vx(i, j) = vx(i, j) - dt * ((px(i + 1, j) + py(i + 1, j)) - (px(i, j) + py(i, j)))
      end do
    end do
  end subroutine vx_cols

  ! vy -= dt * (p(y + 1) - p(y)) for rows r0..r1 of columns 1..cols
  subroutine vy_rows(px, py, vy, dt, r0, r1, cols)
    real(dp), intent(in), contiguous :: px(0:, 0:), py(0:, 0:)
    real(dp), intent(inout), contiguous :: vy(0:, 0:)
    real(dp), intent(in) :: dt
    integer, intent(in) :: r0, r1, cols
    integer :: i, j

    do j = r0, r1
      do i = 1, cols
        vy(i, j) = vy(i, j) - dt * ((px(i, j + 1) + py(i, j + 1)) - (px(i, j) + py(i, j)))
      end do
    end do
  end subroutine vy_rows

  ! px -= dt * (vx(x) - vx(x - 1)) for columns c0..c1 of rows 1..rows
  subroutine px_cols(vx, px, dt, c0, c1, rows)
    real(dp), intent(in), contiguous :: vx(0:, 0:)
    real(dp), intent(inout), contiguous :: px(0:, 0:)
    real(dp), intent(in) :: dt
    integer, intent(in) :: c0, c1, rows
    integer :: i, j

    do j = 1, rows
      do i = c0, c1
        px(i, j) = px(i, j) - dt * (vx(i, j) - vx(i - 1, j))
      end do
    end do
  end subroutine px_cols

  ! py -= dt * (vy(y) - vy(y - 1)) for rows r0..r1 of columns 1..cols
  subroutine py_rows(vy, py, dt, r0, r1, cols)
    real(dp), intent(in), contiguous :: vy(0:, 0:)
    real(dp), intent(inout), contiguous :: py(0:, 0:)
    real(dp), intent(in) :: dt
    integer, intent(in) :: r0, r1, cols
    integer :: i, j

    do j = r0, r1
      do i = 1, cols
        py(i, j) = py(i, j) - dt * (vy(i, j) - vy(i, j - 1))
      end do
    end do
  end subroutine py_rows

  ! The timing protocol of kernels/common/mpilab_timing.h: (calibration if a%iters == 0:
  ! repetitions of 1, 8, 64, ... steps until one lasts min_time / 4, then iters scaled to
  ! min_time), a%warmup untimed steps, then per repetition a barrier, MPI_Wtime, a%iters
  ! steps, MPI_Wtime and the slowest process's time. times(r): seconds per step.
  ! Every process gets the same a%iters, a%warmup and times.
  ! skews: how far apart the processes leave that barrier (its exit skew), in each of
  ! SKEW_REPS barriers, seconds: each process reads MPI_Wtime as it leaves, and
  ! the latest reading less the earliest is one barrier's skew. The processes of one host
  ! (emulated nodes included) read one clock; across hosts this would need the clocks'
  ! offsets (mpilab.timing.barrier_skew measures them for the Python kernels).
  subroutine time_steps(step, barrier, maxall, a, times, skews)
    procedure(step_fn) :: step
    procedure(barrier_fn) :: barrier
    procedure(max_fn) :: maxall
    type(wave_args), intent(inout) :: a
    real(dp), intent(out) :: times(:)
    real(dp), intent(out) :: skews(SKEW_REPS)
    integer :: it, r, k
    real(dp) :: t, best, hi, lo

    if (a%iters == 0) then
      it = 1
      do
        best = huge(best)
        do r = 1, 3
          call barrier()
          t = wtime()
          do k = 1, it
            call step()
          end do
          t = wtime() - t
          call maxall(t)
          best = min(best, t)
        end do
        if (best >= a%min_time / 4 .or. it >= 2**20) then
          a%iters = int(max(1.0_dp, min(2.0_dp**20, &
            anint(it * a%min_time / max(best, 1e-9_dp)))))
          exit
        end if
        it = it * 8
      end do
    end if
    if (a%warmup < 0) a%warmup = min(a%iters, 10)
    do k = 1, a%warmup
      call step()
    end do
    do r = 1, size(times)
      call barrier()
      t = wtime()
      do k = 1, a%iters
        call step()
      end do
      t = wtime() - t
      call maxall(t)
      times(r) = t / a%iters
    end do
    do r = 1, SKEW_REPS
      call barrier()
      t = wtime()
      hi = t
      lo = -t
      call maxall(hi)
      call maxall(lo)
      skews(r) = hi + lo
    end do
  end subroutine time_steps

  ! Flush denormals to zero (and treat them as zero) if asked and possible.
  subroutine set_ftz(on)
    use, intrinsic :: ieee_arithmetic, only: ieee_support_underflow_control, &
      ieee_set_underflow_mode
    logical, intent(in) :: on

    if (on) then
      if (ieee_support_underflow_control(1.0_dp)) call ieee_set_underflow_mode(.false.)
    end if
  end subroutine set_ftz

  subroutine write_field(path, p)
    character(len=*), intent(in) :: path
    real(dp), intent(in) :: p(:, :)
    integer :: u

    open (newunit=u, file=path, access='stream', form='unformatted', status='replace', &
      action='write')
    write (u) p
    close (u)
  end subroutine write_field

  subroutine write_times(path, a, nproc, times, skew, library)
    character(len=*), intent(in) :: path
    type(wave_args), intent(in) :: a
    integer, intent(in) :: nproc
    real(dp), intent(in) :: times(:), skew(:)
    character(len=*), intent(in), optional :: library
    integer :: u, r

    open (newunit=u, file=path, status='replace', action='write')
    if (present(library)) write (u, '(a, 1x, a)') 'library', trim(library)
    write (u, '(a, 1x, a)') 'mode', trim(a%mode)
    write (u, '(a, 1x, i0)') 'ranks', nproc
    write (u, '(a, 2(1x, i0))') 'dims', a%dims
    write (u, '(a, 2(1x, i0))') 'grid', a%nx, a%ny
    write (u, '(a, 1x, i0)') 'iters', a%iters
    write (u, '(a, 1x, i0)') 'warmup', a%warmup
    write (u, '(a)', advance='no') 'times'
    do r = 1, size(times)
      write (u, '(1x, es24.16e3)', advance='no') times(r)
    end do
    write (u, '(a)') ''
    write (u, '(a)', advance='no') 'skew'
    do r = 1, size(skew)
      write (u, '(1x, es24.16e3)', advance='no') skew(r)
    end do
    write (u, '(a)') ''
    close (u)
  end subroutine write_times

end module wave_common
